use crate::gzip::GzipCompressor;
use crate::lz4::Lz4Compressor;
use crate::snappy::SnappyCompressor;
use crate::zstd::ZstdCompressor;
use crate::{Codec, CodecError, CompressionOptions};

/// The library state of the compressor's codec.
#[derive(Debug)]
enum State {
    None,
    Gzip(GzipCompressor),
    // Boxed: snap's encoder carries its 2 KiB hash table inline.
    Snappy(Box<SnappyCompressor>),
    Lz4(Lz4Compressor),
    Zstd(ZstdCompressor),
}

/// A compressor for one codec at fixed options, keeping its library state between
/// calls so that per-batch setup is paid once.
#[derive(Debug)]
pub struct Compressor {
    codec: Codec,
    options: CompressionOptions,
    state: State,
}

impl Compressor {
    pub fn new(codec: Codec, options: &CompressionOptions) -> Compressor {
        let state = match codec {
            Codec::None => State::None,
            Codec::Gzip => State::Gzip(GzipCompressor::new(
                options.gzip_effective_level(),
                options.gzip_provider(),
            )),
            Codec::Snappy => State::Snappy(Box::new(SnappyCompressor::new(options.snappy_block()))),
            Codec::Lz4 => State::Lz4(Lz4Compressor::new(options.lz4_level(), options.lz4_block())),
            Codec::Zstd => State::Zstd(ZstdCompressor::new(
                options.zstd_level(),
                options.zstd_window(),
            )),
        };
        Compressor {
            codec,
            options: options.clone(),
            state,
        }
    }

    pub fn codec(&self) -> Codec {
        self.codec
    }

    pub fn options(&self) -> &CompressionOptions {
        &self.options
    }

    /// Appends the compressed form of `input` to `out`, in Kafka's framing for the codec.
    /// `out`'s existing bytes are left as they are (a caller may have reserved a header).
    /// On error `out` is as it was before the call.
    pub fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        let start = out.len();
        let result = match &mut self.state {
            State::None => {
                out.extend_from_slice(input);
                Ok(())
            }
            State::Gzip(gzip) => gzip.compress(input, out),
            State::Snappy(snappy) => snappy.compress(input, out),
            State::Lz4(lz4) => lz4.compress(input, out),
            State::Zstd(zstd) => zstd.compress(input, out),
        };
        if result.is_err() {
            out.truncate(start);
        }
        result
    }
}
