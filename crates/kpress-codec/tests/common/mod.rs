//! Shared helpers: real payloads from the project's datasets, and one-call wrappers.
#![allow(dead_code)]

use std::path::PathBuf;

use kpress_codec::{Codec, CodecError, CompressionOptions, Compressor, Decompressor};

/// The Apache access log from the repository's `datasets/` (or `KPRESS_DATASETS`);
/// a missing dataset fails the test rather than quietly testing something else.
pub(crate) fn apache_log() -> Vec<u8> {
    let dir = std::env::var_os("KPRESS_DATASETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../datasets"));
    let path = dir.join("apache_access.log");
    std::fs::read(&path).unwrap_or_else(|e| panic!("dataset {}: {e}", path.display()))
}

/// The apache log repeated or cut to `len` bytes.
pub(crate) fn log_payload(len: usize) -> Vec<u8> {
    apache_log().iter().copied().cycle().take(len).collect()
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
