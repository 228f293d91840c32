//! What one response's re-encode did, for the metrics: the partitions whose records
//! changed, what each batch became, and why a partition was cut. Also which batches go
//! to the consumer as stored. No I/O, no metrics.

use std::sync::Arc;

use kpress_batch::PassReason;
use kpress_codec::Codec;

/// Why a partition's records were cut before a batch its consumer cannot read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum CutReason {
    /// The batch could not be re-encoded for a reason [`passes_as_stored`] does not
    /// name (the response's budget, a compressor failure).
    Batch(PassReason),
    /// The response's batches already decompressed to `[limits]
    /// max_request_decompressed_bytes` together.
    ResponseBudget,
    /// The re-encode ran past its deadline.
    Deadline,
    /// No work slot within `[limits] max_rewrite_wait_ms`.
    Overloaded,
    /// The response would outgrow `[limits] max_frame_bytes`.
    MaxFrameBytes,
}

impl CutReason {
    /// The `reason` label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CutReason::Batch(PassReason::RequestDecompressBudget) | CutReason::ResponseBudget => {
                "response_budget"
            }
            CutReason::Batch(reason) => reason.as_str(),
            CutReason::Deadline => "deadline",
            CutReason::Overloaded => "overloaded",
            CutReason::MaxFrameBytes => "max_frame_bytes",
        }
    }
}

/// What one response's re-encode did, per topic for the metrics.
#[derive(Debug, Default)]
pub(crate) struct ResponseReport {
    /// One entry per partition whose records changed.
    pub(crate) partitions: Vec<PartitionReport>,
    /// The Fetch version the consumer asked at: whether a batch was re-encoded for its
    /// version or for a `[[clients]]` rule.
    pub(crate) client_version: i16,
}

/// One partition whose records changed.
#[derive(Debug)]
pub(crate) struct PartitionReport {
    pub(crate) topic: Arc<str>,
    pub(crate) bytes_in: usize,
    pub(crate) bytes_out: usize,
    /// Batches re-encoded, by (from, to); not those copied from the cache.
    pub(crate) reencoded: Vec<(Codec, Codec)>,
    /// Batches served re-encoded from the cache, at no codec work.
    pub(crate) from_cache: usize,
    /// Batches passed as stored because they can never be re-encoded, by reason.
    pub(crate) passed: Vec<PassReason>,
    pub(crate) cut: Option<CutReason>,
}

/// Whether a batch kpress could not re-encode for `reason` goes to the consumer as
/// stored: it is damaged, a decompression bomb, or not a batch kpress re-encodes (no
/// records, a control batch, an older message format), so every later fetch would
/// fail the same way and cutting before it would stall the consumer there for good.
/// Anything else (a budget, the deadline, no work slot) may pass on the next fetch.
pub(crate) fn passes_as_stored(reason: PassReason) -> bool {
    matches!(
        reason,
        PassReason::Malformed
            | PassReason::CrcMismatch
            | PassReason::UnknownCodec
            | PassReason::DecompressFailed
            | PassReason::RecordCountMismatch
            | PassReason::DecompressLimit
            | PassReason::DecompressRatio
            | PassReason::EmptyBatch
            | PassReason::ControlBatch
            | PassReason::NotMagicV2
    )
}
