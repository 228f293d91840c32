use std::sync::Arc;

use kpress_deflate::{GzipProvider, ProviderChoice, ProviderKind};

use crate::zstd::ZstdDecompressor;
use crate::{gzip, lz4, snappy, Codec, CodecError, CompressionOptions};

/// A decompressor for every codec, keeping library state between calls.
#[derive(Debug)]
pub struct Decompressor {
    /// The provider each gzip provider choice met so far resolved to, so that
    /// switching between policies neither resolves (nor logs a stand-in) again.
    gzip_providers: Vec<(ProviderChoice, Arc<dyn GzipProvider>)>,
    /// Index into `gzip_providers` of the one that reads gzip now.
    gzip: usize,
    snappy: snap::raw::Decoder,
    zstd: ZstdDecompressor,
}

impl Default for Decompressor {
    fn default() -> Self {
        Decompressor {
            gzip_providers: vec![(
                ProviderChoice::Default,
                gzip::provider(ProviderChoice::Default),
            )],
            gzip: 0,
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
        let mut decompressor = Decompressor::default();
        decompressor.set_gzip_provider(choice);
        decompressor
    }

    /// Reads gzip through `choice` from now on; the other codecs' state is kept, so
    /// one decompressor serves policies with different providers.
    pub fn set_gzip_provider(&mut self, choice: ProviderChoice) {
        self.gzip = match self.gzip_providers.iter().position(|(c, _)| *c == choice) {
            Some(i) => i,
            None => {
                self.gzip_providers.push((choice, gzip::provider(choice)));
                self.gzip_providers.len() - 1
            }
        };
    }

    /// The provider that reads gzip here (after `auto` and any stand-in resolved).
    pub fn gzip_provider(&self) -> ProviderKind {
        self.gzip_providers[self.gzip].1.kind()
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
            Codec::Gzip => gzip::decompress(&*self.gzip_providers[self.gzip].1, input, limit, out),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_gzip_provider_choice_is_resolved_once() {
        let mut d = Decompressor::new();
        // Only the built-in providers: the accelerators are optional on a test host.
        let choices = ["libdeflate", "zlib", "libdeflate"];
        for name in choices {
            let choice: ProviderChoice = name.parse().unwrap();
            d.set_gzip_provider(choice);
            assert_eq!(d.gzip_provider().name(), name);
        }
        let resolved: Vec<(&str, &str)> = d
            .gzip_providers
            .iter()
            .map(|(choice, p)| (choice.name(), p.kind().name()))
            .collect();
        // The default (zlib) first, then one per choice, reused.
        assert_eq!(
            resolved,
            [
                ("zlib", "zlib"),
                ("libdeflate", "libdeflate"),
                ("zlib", "zlib")
            ]
        );
    }
}
