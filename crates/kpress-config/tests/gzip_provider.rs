//! `compression.gzip.provider` (KIP-1121) in [defaults] and [[topics]]: the default
//! and located errors for bad values. Naming each provider (QATzip and ISA-L need their
//! libraries) is kpress-tests' `provider_choice.rs`.

use kpress_codec::gzip_providers::ProviderChoice;
use kpress_config::parse;

mod common;

use common::{problem_texts, HEAD};

#[test]
fn default_policy_is_zlib_and_unchanged() {
    let text = format!("{HEAD}[defaults]\ncompression.type = \"zstd\"\n");
    let config = parse(&text, "t.toml").unwrap();
    assert_eq!(
        config.defaults.options.gzip_provider(),
        ProviderChoice::Default
    );
    assert_eq!(
        config.defaults.to_string(),
        "zstd (compression.zstd.level=3, compression.zstd.window=0), recompress codec-differs"
    );
}

#[test]
fn bad_provider_values_are_located_with_the_allowed_names() {
    let text = format!(
        r#"{HEAD}[defaults]
compression.gzip.provider = "brotli"
[[topics]]
match = "a"
compression.gzip.provider = 3
[[topics]]
match = "b"
compression.gzip.providr = "isal"
"#
    );
    let p = problem_texts(&text);
    assert_eq!(p.len(), 3, "{p:#?}");
    assert_eq!(
        p[0],
        "t.toml:8:29: compression.gzip.provider = \"brotli\": unknown gzip provider (allowed: auto, qat, isal, libdeflate, zlib)"
    );
    assert_eq!(
        p[1],
        "t.toml:11:29: compression.gzip.provider = 3: must be a string, not integer (allowed: auto, qat, isal, libdeflate, zlib)"
    );
    assert!(
        p[2].starts_with(
            "t.toml:14:18: compression.gzip.providr: unknown key in [[topics]] (allowed: match, "
        ) && p[2].ends_with(
            "compression.gzip.provider, overload.compression.type, overload.compression.gzip.level, \
             overload.compression.lz4.level, overload.compression.zstd.level, overload.min_level, \
             overload.max_cpu_share); \
             did you mean compression.gzip.provider?"
        ),
        "{}",
        p[2]
    );
}
