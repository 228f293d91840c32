use std::sync::Arc;

use kpress_deflate::{GzipProvider, ProviderChoice, ProviderKind};

use crate::zstd::ZstdDecompressor;
use crate::{gzip, lz4, snappy, Codec, CodecError, CompressionOptions};

/// A decompressor for every codec, keeping library state between calls.
#[derive(Debug)]
pub struct Decompressor {
    gzip: Arc<dyn GzipProvider>,
    snappy: snap::raw::Decoder,
    zstd: ZstdDecompressor,
}

impl Default for Decompressor {
    fn default() -> Self {
        Decompressor {
            gzip: gzip::provider(ProviderChoice::Default),
            snappy: snap::raw::Decoder::new(),
            zstd: ZstdDecompressor::default(),
        }
    }
}

impl Decompressor {
    pub fn new() -> Decompressor {
        Decompressor::default()
    }

    /// A decompressor that reads gzip through `options`' `compression.gzip.provider`
    /// (the default reads it with zlib, like [`new`](Self::new)).
    pub fn with_options(options: &CompressionOptions) -> Decompressor {
        Decompressor::with_gzip_provider(options.gzip_provider())
    }

    /// A decompressor that reads gzip through `choice` (one checked when its option
    /// was set; see [`CompressionOptions::set_gzip_provider`]).
    pub fn with_gzip_provider(choice: ProviderChoice) -> Decompressor {
        Decompressor {
            gzip: gzip::provider(choice),
            ..Decompressor::default()
        }
    }

    /// The provider that reads gzip here (after `auto` and any stand-in resolved).
    pub fn gzip_provider(&self) -> ProviderKind {
        self.gzip.kind()
    }

    /// Appends the decompressed form of `input` to `out` and returns how many bytes it
    /// appended. Fails with [`CodecError::LimitExceeded`] if that would be more than
    /// `limit`, without allocating more than `limit` bytes. On error `out` is as it
    /// was before the call.
    pub fn decompress(
        &mut self,
        codec: Codec,
        input: &[u8],
        limit: usize,
        out: &mut Vec<u8>,
    ) -> Result<usize, CodecError> {
        let start = out.len();
        let result = match codec {
            Codec::None => {
                if input.len() > limit {
                    Err(CodecError::LimitExceeded { codec, limit })
                } else {
                    out.extend_from_slice(input);
                    Ok(input.len())
                }
            }
            Codec::Gzip => gzip::decompress(&*self.gzip, input, limit, out),
            Codec::Snappy => snappy::decompress(&mut self.snappy, input, limit, out),
            Codec::Lz4 => lz4::decompress(input, limit, out),
            Codec::Zstd => self.zstd.decompress(input, limit, out),
        };
        if result.is_err() {
            out.truncate(start);
        }
        result
    }
}
