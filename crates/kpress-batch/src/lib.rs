//! Kafka RecordBatch v2: a zero-copy view over its bytes, and its recompression into a
//! per-topic codec, without I/O.
//!
//! A rewrite changes only the records payload, attribute bits 0-2, `length` and `crc`
//! (the README's "What kpress does to a batch"). Anything that cannot or should not be
//! rewritten — corrupt, control, empty, legacy, or a rewrite that does not pay — is
//! passed through byte for byte, with a [`PassReason`] saying why.

mod batch;
mod error;
mod policy;
mod records;
mod rewrite;
mod stats;

pub mod builder;

pub use batch::{batches, Batches, RecordBatch, CRC_START, HEADER_LEN, LOG_OVERHEAD, MIN_LENGTH};
pub use error::BatchError;
pub use policy::{
    pass_as_sent, CompressionType, PolicyLookup, RecompressMode, RewritePolicy, Target,
    TargetSource, UnknownMode, UnknownTarget, DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_DECOMPRESSED_BYTES, DEFAULT_MAX_DECOMPRESSION_RATIO,
};
pub use rewrite::{pass_without_codec_work, ProduceAllowance, Recompressor};
pub use stats::{Outcome, PassReason, RewriteStats};
