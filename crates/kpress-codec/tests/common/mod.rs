//! Shared helpers: real payloads from the project's datasets, and one-call wrappers.
#![allow(dead_code)]

use std::path::PathBuf;

use kpress_codec::{Codec, CodecError, CompressionOptions, Compressor, Decompressor};

/// The Apache access log dataset, or `None` (with a message) if it is missing.
pub(crate) fn apache_log() -> Option<Vec<u8>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/datasets/apache_access.log");
    match std::fs::read(&path) {
        Ok(bytes) => Some(bytes),
        Err(e) => {
            eprintln!("skipping: dataset {} unavailable: {e}", path.display());
            None
        }
    }
}

/// The first `len` bytes of the apache log, or a synthetic log-like text if it is missing.
pub(crate) fn log_payload(len: usize) -> Vec<u8> {
    let source = apache_log().unwrap_or_else(|| {
        (0..20_000u32)
            .flat_map(|i| {
                format!(
                    "10.0.{}.{} - - GET /path/{} HTTP/1.1 200 {}\n",
                    i % 7,
                    i % 251,
                    i % 97,
                    i * 13
                )
                .into_bytes()
            })
            .collect()
    });
    source.iter().copied().cycle().take(len).collect()
}

pub(crate) fn options(pairs: &[(&str, i64)]) -> CompressionOptions {
    let mut options = CompressionOptions::default();
    for &(key, value) in pairs {
        options.set_int(key, value).unwrap();
    }
    options
}

pub(crate) fn compress(codec: Codec, options: &CompressionOptions, input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    Compressor::new(codec, options)
        .compress(input, &mut out)
        .unwrap();
    out
}

pub(crate) fn decompress(codec: Codec, input: &[u8], limit: usize) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::new();
    let n = Decompressor::new().decompress(codec, input, limit, &mut out)?;
    assert_eq!(n, out.len());
    Ok(out)
}
