//! `compression.gzip.provider` (KIP-1121) in [defaults] and [[topics]]: a string,
//! inherited like every option, shown in the summary, with located errors. QATzip is
//! present here (`.cache/qatzip`, software backup), so `qat` is accepted.

use kpress_batch::{PolicyLookup, Target};
use kpress_codec::gzip_providers::{ProviderChoice, ProviderKind};
use kpress_codec::options::GZIP_PROVIDER;
use kpress_config::{parse, PolicySet};

mod common;

use common::{problem_texts, HEAD};

fn provider_of(set: &PolicySet, topic: &str) -> ProviderChoice {
    match &set.policy_for(topic).target {
        Target::Codec { options, .. } => options.gzip_provider(),
        Target::Producer => panic!("{topic}: producer policy"),
    }
}

#[test]
fn provider_is_read_in_defaults_and_rules_and_inherited() {
    let text = format!(
        r#"{HEAD}[defaults]
compression.type = "gzip"
compression.gzip.provider = "isal"
[[topics]]
match = "fast.*"
compression.type = "gzip"
compression.gzip.level = 1
compression.gzip.provider = "libdeflate"
[[topics]]
match = "inherits"
compression.type = "gzip"
[[topics]]
match = "zstd.*"
compression.type = "zstd"
compression.gzip = {{ provider = "QAT" }}
[[topics]]
match = "plain"
compression.type = "zstd"
compression.gzip.provider = "zlib"
[[topics]]
match = "auto"
compression.type = "gzip"
compression.gzip.provider = "auto"
"#
    );
    let config = parse(&text, "t.toml").unwrap();
    let set = PolicySet::new(&config);
    let named = |k| ProviderChoice::Named(k);
    assert_eq!(provider_of(&set, "other"), named(ProviderKind::Isal));
    assert_eq!(provider_of(&set, "fast.a"), named(ProviderKind::Libdeflate));
    assert_eq!(provider_of(&set, "inherits"), named(ProviderKind::Isal));
    assert_eq!(provider_of(&set, "zstd.a"), named(ProviderKind::Qat));
    assert_eq!(provider_of(&set, "plain"), named(ProviderKind::Zlib));
    assert_eq!(provider_of(&set, "auto"), ProviderChoice::Auto);
    assert_eq!(
        config.topics[0]
            .policy
            .options
            .get_text(GZIP_PROVIDER)
            .as_deref(),
        Some("libdeflate")
    );

    // The summary shows the provider of gzip targets, and of gzip input elsewhere.
    assert_eq!(
        config.topics[0].policy.to_string(),
        "gzip (compression.gzip.level=1, compression.gzip.buffer=8192, compression.gzip.provider=libdeflate), recompress codec-differs"
    );
    assert_eq!(
        config.topics[2].policy.to_string(),
        "zstd (compression.zstd.level=3, compression.zstd.window=0), gzip input read by compression.gzip.provider=qat, recompress codec-differs"
    );
    // Without a provider a zstd target reads as before; `zlib` named is shown.
    assert!(config.topics[3]
        .policy
        .to_string()
        .contains("gzip input read by compression.gzip.provider=zlib"));
    let auto = config.topics[4].policy.to_string();
    // No QAT device on this machine: auto is libdeflate.
    assert!(
        auto.contains("compression.gzip.provider=auto (libdeflate)"),
        "{auto}"
    );
    assert!(config
        .defaults
        .to_string()
        .contains("compression.gzip.provider=isal"));
}

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
            "compression.zstd.window, compression.gzip.provider); did you mean compression.gzip.provider?"
        ),
        "{}",
        p[2]
    );
}
