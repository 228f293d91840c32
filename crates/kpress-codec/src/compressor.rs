use crate::{Codec, CodecError, CompressionOptions};

/// A compressor for one codec at fixed options, keeping its library state between
/// calls so that per-batch setup is paid once.
#[derive(Debug)]
pub struct Compressor {
    codec: Codec,
    options: CompressionOptions,
}

impl Compressor {
    pub fn new(codec: Codec, options: &CompressionOptions) -> Compressor {
        Compressor {
            codec,
            options: options.clone(),
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
    pub fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        let _ = (input, out);
        Err(CodecError::Compress {
            codec: self.codec,
            reason: "not yet implemented".into(),
        })
    }
}
