//! gzip through `compression.gzip.provider` (KIP-1121) without the option: gzip is
//! zlib, byte for byte. That each named provider (ISA-L and QATzip included) is the one
//! used, and that several at once read each other, needs the accelerator libraries:
//! kpress-tests' `provider_choice.rs`.

mod common;

use common::log_payload;
use kpress_codec::gzip_providers::{GzipProvider, ZlibProvider};
use kpress_codec::options::{GZIP_LEVEL, GZIP_PROVIDER};
use kpress_codec::{Codec, CompressionOptions, Compressor};

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
