//! `compression.gzip.provider` (KIP-1121) naming each provider, QATzip and ISA-L
//! included, so it needs the accelerator libraries `scripts/setup.sh` provides (QATzip
//! from `.cache/qatzip` in its software backup, no QAT device; ISA-L's `libisal2`):
//! the codec layer uses the configured provider (its output is byte for byte the
//! provider's own) and several providers at once read each other; a policy file names
//! a provider in `[defaults]` and `[[topics]]`, inherited like every option and shown
//! in the summary. The crates' own tests cover what needs no accelerator.

use std::path::Path;
use std::sync::Arc;

use kpress_batch::{PolicyLookup, Target};
use kpress_codec::gzip_providers::{
    GzipProvider, IsalProvider, LibdeflateProvider, ProviderChoice, ProviderKind, Registry,
    ZlibProvider,
};
use kpress_codec::options::{GZIP_LEVEL, GZIP_PROVIDER};
use kpress_codec::{Codec, CompressionOptions, Compressor, Decompressor};
use kpress_config::{parse, PolicySet};

/// The smallest valid policy file: a listener and an upstream, no policy.
const HEAD: &str = r#"[listener]
bind = "127.0.0.1:19092"
advertised_host = "127.0.0.1"
node_port_base = 19100
[upstream]
bootstrap_servers = ["127.0.0.1:9092"]
"#;

/// The apache log repeated or cut to `len` bytes.
fn log_payload(len: usize) -> Vec<u8> {
    let path = kpress_tests::paths::datasets_dir().join("apache_access.log");
    let log = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", Path::display(&path)));
    log.iter().copied().cycle().take(len).collect()
}

fn gzip_options(provider: Option<&str>, level: i64) -> CompressionOptions {
    let mut o = CompressionOptions::default();
    o.set_int(GZIP_LEVEL, level).unwrap();
    if let Some(p) = provider {
        o.set(GZIP_PROVIDER, p).unwrap();
    }
    o
}

fn compress(options: &CompressionOptions, input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    Compressor::new(Codec::Gzip, options)
        .compress(input, &mut out)
        .unwrap();
    out
}

fn provider_of(set: &PolicySet, topic: &str) -> ProviderChoice {
    match &set.policy_for(topic).target {
        Target::Codec { options, .. } => options.gzip_provider(),
        Target::Producer => panic!("{topic}: producer policy"),
    }
}

#[test]
fn the_configured_provider_is_the_one_used() {
    let input = log_payload(300_000);
    let direct = |p: &dyn GzipProvider| {
        let mut out = Vec::new();
        p.compress(&input, 6, &mut out).unwrap();
        out
    };
    let qat = Registry::global()
        .get(ProviderKind::Qat)
        .expect("QATzip from .cache/qatzip");
    for (name, expected) in [
        ("libdeflate", direct(&LibdeflateProvider)),
        ("isal", direct(&IsalProvider)),
        ("qat", direct(&*qat)),
        ("zlib", direct(&ZlibProvider)),
    ] {
        let ours = compress(&gzip_options(Some(name), 6), &input);
        assert!(ours == expected, "{name}");
    }
    // The providers' outputs differ, so equality above identifies the provider.
    assert!(direct(&LibdeflateProvider) != direct(&ZlibProvider));
    assert!(direct(&IsalProvider) != direct(&ZlibProvider));
}

#[test]
fn several_providers_at_once_on_different_threads_read_each_other() {
    let input = Arc::new(log_payload(200_000));
    let names = ["zlib", "libdeflate", "isal", "qat", "auto"];
    let threads: Vec<_> = names
        .iter()
        .map(|&name| {
            let input = input.clone();
            std::thread::spawn(move || {
                let options = gzip_options(Some(name), 6);
                let mut compressor = Compressor::new(Codec::Gzip, &options);
                let mut outputs = Vec::new();
                for round in 0..5 {
                    let part = &input[round * 20_000..][..100_000];
                    let mut out = Vec::new();
                    compressor.compress(part, &mut out).unwrap();
                    outputs.push((round, out));
                }
                outputs
            })
        })
        .collect();
    let all: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for reader in names {
        let mut d = Decompressor::with_options(&gzip_options(Some(reader), 6));
        for outputs in &all {
            for (round, gz) in outputs {
                let mut back = Vec::new();
                d.decompress(Codec::Gzip, gz, 100_000, &mut back).unwrap();
                assert!(back == input[round * 20_000..][..100_000], "{reader}");
            }
        }
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
