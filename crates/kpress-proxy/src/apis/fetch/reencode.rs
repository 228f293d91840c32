//! One Fetch response's records re-encoded for a consumer: each batch the consumer
//! cannot read is recompressed into one it can, everything else kept as stored. No
//! I/O, no metrics: the caller counts what [`ResponseReport`] says.
//!
//! A partition never carries a batch its consumer cannot read: when one cannot be
//! re-encoded (damaged, over a limit, past the deadline, no work slot), the partition's
//! records stop before it. The consumer reads the batches before it and fetches again
//! from its offset (an empty partition when it is the first).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use kpress_batch::{
    batches, BatchError, Outcome, PassReason, ProduceAllowance, Recompressor, RewritePolicy,
};
use kpress_codec::Codec;

/// Why a partition's records were cut before a batch its consumer cannot read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum CutReason {
    /// The batch could not be re-encoded (damaged, a bomb, over a per-batch limit).
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
}

/// One partition whose records changed.
#[derive(Debug)]
pub(crate) struct PartitionReport {
    pub(crate) topic: Arc<str>,
    pub(crate) bytes_in: usize,
    pub(crate) bytes_out: usize,
    /// Batches re-encoded, by (from, to).
    pub(crate) reencoded: Vec<(Codec, Codec)>,
    pub(crate) cut: Option<CutReason>,
}

/// What a response's re-encode may spend.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReencodeLimits {
    /// Decompressed bytes all batches of the response may use together.
    pub(crate) response_decompressed_bytes: usize,
    /// Past this, the batches still to re-encode are cut.
    pub(crate) deadline: Option<Instant>,
    /// The most bytes the response frame may grow to.
    pub(crate) max_frame_bytes: usize,
    /// No work slot: every batch that needs re-encoding is cut.
    pub(crate) overloaded: bool,
}

/// The re-encode of one response, partition by partition.
pub(crate) struct Reencoder<'a> {
    recompressor: &'a mut Recompressor,
    allowance: ProduceAllowance,
    limits: ReencodeLimits,
    /// The response frame's size as it would be now.
    frame_bytes: usize,
    pub(crate) report: ResponseReport,
}

impl<'a> Reencoder<'a> {
    pub(crate) fn new(
        recompressor: &'a mut Recompressor,
        limits: ReencodeLimits,
        frame_bytes: usize,
    ) -> Reencoder<'a> {
        Reencoder {
            recompressor,
            // A Fetch response's batches share one decompression allowance as a
            // Produce request's do; any target codec is allowed.
            allowance: ProduceAllowance::new(true, limits.response_decompressed_bytes),
            limits,
            frame_bytes,
            report: ResponseReport::default(),
        }
    }

    /// The records of one partition of `topic` with every batch in a codec `needs`
    /// names re-encoded by `policy` (whose target is the consumer's codec), or `None`
    /// when no batch needed it.
    pub(crate) fn partition(
        &mut self,
        topic: &str,
        records: &[u8],
        policy: &RewritePolicy,
        needs: impl Fn(Codec) -> bool,
    ) -> Option<Bytes> {
        if !needs_work(records, &needs) {
            return None;
        }
        let mut out = Vec::with_capacity(records.len());
        let mut reencoded = Vec::new();
        let mut cut = None;
        let mut iter = batches(records);
        loop {
            let before = iter.remainder();
            let Some(item) = iter.next() else { break };
            let consumed = &before[..before.len() - iter.remainder().len()];
            let batch = match item {
                Ok(batch) => batch,
                Err(BatchError::NotMagicV2 { .. }) => {
                    out.extend_from_slice(consumed);
                    continue;
                }
                // A batch cut by the fetch size, or bytes that do not frame: the
                // consumer skips a partial batch and fetches from its offset.
                Err(_) => {
                    out.extend_from_slice(before);
                    break;
                }
            };
            if !batch.codec().is_some_and(&needs) {
                out.extend_from_slice(batch.bytes());
                continue;
            }
            if let Some(reason) = self.stop_before_work() {
                cut = Some(reason);
                break;
            }
            let start = out.len();
            let mut outcome = None;
            self.recompressor.rewrite_partition(
                batch.bytes(),
                policy,
                &mut self.allowance,
                &mut out,
                |o, _| outcome = Some(*o),
            );
            match outcome {
                Some(Outcome::Rewritten {
                    from,
                    to,
                    bytes_in,
                    bytes_out,
                }) => {
                    // Bytes the cut parts of earlier partitions freed are not given
                    // back: the estimate only ever overstates the frame.
                    let grown = (self.frame_bytes + bytes_out).saturating_sub(bytes_in);
                    if grown > self.limits.max_frame_bytes {
                        out.truncate(start);
                        cut = Some(CutReason::MaxFrameBytes);
                        break;
                    }
                    self.frame_bytes = grown;
                    reencoded.push((from, to));
                }
                Some(Outcome::PassedThrough(reason)) => {
                    out.truncate(start);
                    cut = Some(CutReason::Batch(reason));
                    break;
                }
                None => {
                    out.truncate(start);
                    cut = Some(CutReason::Batch(PassReason::Malformed));
                    break;
                }
            }
        }
        self.report.partitions.push(PartitionReport {
            topic: Arc::from(topic),
            bytes_in: records.len(),
            bytes_out: out.len(),
            reencoded,
            cut,
        });
        Some(Bytes::from(out))
    }

    /// Why no more batches may be re-encoded now, if so.
    fn stop_before_work(&self) -> Option<CutReason> {
        if self.limits.overloaded {
            return Some(CutReason::Overloaded);
        }
        if self.limits.deadline.is_some_and(|d| Instant::now() >= d) {
            return Some(CutReason::Deadline);
        }
        if self.allowance.decompressed_bytes_left() == 0 {
            return Some(CutReason::ResponseBudget);
        }
        None
    }
}

/// Whether some whole batch of `records` is in a codec `needs` names.
pub(crate) fn needs_work(records: &[u8], needs: &impl Fn(Codec) -> bool) -> bool {
    batches(records)
        .filter_map(Result::ok)
        .any(|batch| batch.codec().is_some_and(needs))
}
