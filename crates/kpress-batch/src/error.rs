/// Why bytes could not be framed as a record batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// Fewer bytes than the batch needs: the 17 bytes up to the magic byte, or the
    /// `12 + length` bytes its length field claims.
    #[error("truncated batch: needs {needed} bytes, {available} available")]
    Truncated { needed: usize, available: usize },
    /// The length field is negative, or too small for the 61-byte v2 header.
    #[error("invalid batch length field {length}")]
    BadLength { length: i32 },
    /// A magic 0 or 1 message set entry (or garbage with a plausible length). `size` is
    /// how many bytes its length field frames, so a caller may step over it.
    #[error("magic {magic} entry of {size} bytes is not a v2 record batch")]
    NotMagicV2 { magic: i8, size: usize },
}
