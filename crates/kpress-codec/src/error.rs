use crate::Codec;

/// Why a payload could not be compressed or decompressed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The input is not a valid stream of the codec's framing.
    #[error("corrupt {codec} payload: {reason}")]
    Corrupt { codec: Codec, reason: String },
    /// The payload decompresses (or claims to) to more than the caller's limit.
    #[error("{codec} payload decompresses to more than the {limit}-byte limit")]
    LimitExceeded { codec: Codec, limit: usize },
    /// The compression library reported a failure.
    #[error("{codec} compression failed: {reason}")]
    Compress { codec: Codec, reason: String },
}
