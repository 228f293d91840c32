//! gzip through `compression.gzip.provider` (KIP-1121): the default is unchanged, the
//! configured provider is the one used, several run at once, all read each other.

mod common;

use std::sync::Arc;

use common::log_payload;
use kpress_codec::gzip_providers::{
    GzipProvider, IsalProvider, LibdeflateProvider, ProviderKind, Registry, ZlibProvider,
};
use kpress_codec::options::{GZIP_LEVEL, GZIP_PROVIDER};
use kpress_codec::{Codec, CompressionOptions, Compressor, Decompressor};

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

#[test]
fn without_a_provider_option_gzip_is_zlib_as_before() {
    let input = log_payload(1 << 20);
    for level in [-1, 1, 5, 6, 9] {
        let default = compress(&gzip_options(None, level), &input);
        let zlib = compress(&gzip_options(Some("zlib"), level), &input);
        let mut direct = Vec::new();
        let effective = if level < 0 { 6 } else { level as u32 };
        ZlibProvider
            .compress(&input, effective, &mut direct)
            .unwrap();
        assert!(default == zlib && zlib == direct, "level {level}");
        // flate2 reads it as exactly one member.
        let mut decoder = flate2::read::GzDecoder::new(&default[..]);
        let mut back = Vec::new();
        std::io::Read::read_to_end(&mut decoder, &mut back).unwrap();
        assert!(back == input && decoder.into_inner().is_empty());
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
