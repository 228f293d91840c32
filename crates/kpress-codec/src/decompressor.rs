use crate::{Codec, CodecError};

/// A decompressor for every codec, keeping library state between calls.
#[derive(Debug, Default)]
pub struct Decompressor {}

impl Decompressor {
    pub fn new() -> Decompressor {
        Decompressor::default()
    }

    /// Appends the decompressed form of `input` to `out` and returns how many bytes it
    /// appended. Fails with [`CodecError::LimitExceeded`] if that would be more than
    /// `limit`, without allocating more than `limit` bytes.
    pub fn decompress(
        &mut self,
        codec: Codec,
        input: &[u8],
        limit: usize,
        out: &mut Vec<u8>,
    ) -> Result<usize, CodecError> {
        let _ = (input, limit, out);
        Err(CodecError::Corrupt {
            codec,
            reason: "not yet implemented".into(),
        })
    }
}
