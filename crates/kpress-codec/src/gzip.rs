//! gzip through the provider `compression.gzip.provider` selects (see `kpress-deflate`):
//! exactly one RFC 1952 member written, one or more members read back, within a limit.
//!
//! The member framing (header, CRC-32, ISIZE) is `kpress_deflate::member`, the one
//! implementation every provider shares; this module only maps providers and errors
//! onto the codec's types. Without a provider option the provider is zlib (flate2 over
//! zlib-rs), the same library, level and framing as before providers existed.

use std::sync::Arc;

use kpress_deflate::{
    compress_with_fallback, decompress_with_fallback, DeflateError, GzipProvider, ProviderChoice,
    Registry,
};

use crate::{Codec, CodecError};

/// Writes one gzip member per call through one provider at one level.
#[derive(Debug)]
pub(crate) struct GzipCompressor {
    provider: Arc<dyn GzipProvider>,
    level: u32,
}

impl GzipCompressor {
    pub(crate) fn new(level: u32, choice: ProviderChoice) -> GzipCompressor {
        GzipCompressor {
            provider: provider(choice),
            level,
        }
    }

    /// A provider failure mid-batch is not the batch's fault: zlib compresses it
    /// instead (counted by `kpress_deflate::compress_fallbacks`).
    pub(crate) fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        compress_with_fallback(&*self.provider, input, self.level, out)
            .map(|_| ())
            .map_err(codec_error)
    }
}

/// The provider for `choice`. Options only hold a provider that was available when
/// it was set (see `CompressionOptions::set`), so this resolves; if the host lost it
/// since, zlib stands in and the registry logs why.
pub(crate) fn provider(choice: ProviderChoice) -> Arc<dyn GzipProvider> {
    Registry::global().resolve_or_zlib(choice)
}

/// Reads one or more gzip members into `out`, appending at most `limit` bytes.
pub(crate) fn decompress(
    provider: &dyn GzipProvider,
    input: &[u8],
    limit: usize,
    out: &mut Vec<u8>,
) -> Result<usize, CodecError> {
    decompress_with_fallback(provider, input, limit, out).map_err(codec_error)
}

fn codec_error(e: DeflateError) -> CodecError {
    match e {
        DeflateError::Corrupt { reason, .. } => CodecError::Corrupt {
            codec: Codec::Gzip,
            reason,
        },
        DeflateError::LimitExceeded { limit } => CodecError::LimitExceeded {
            codec: Codec::Gzip,
            limit,
        },
        DeflateError::Provider { provider, reason } => CodecError::Compress {
            codec: Codec::Gzip,
            reason: format!("{provider} provider: {reason}"),
        },
    }
}
