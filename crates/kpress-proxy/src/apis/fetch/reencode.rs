//! One Fetch response's records re-encoded for a consumer: each batch the consumer
//! cannot read is recompressed into one it can (or copied from the cache of re-encoded
//! batches, when another consumer had it re-encoded), everything else kept as stored.
//! No I/O, no metrics: the caller counts what [`ResponseReport`] says.
//!
//! A batch that can never be re-encoded (damaged, or a decompression bomb: see
//! [`passes_as_stored`]) goes to the consumer as stored, and the batches after it are
//! re-encoded as usual: the consumer meets it as it would without kpress (a corrupt
//! record or its own codec error), never stalled at its offset. When a batch cannot be
//! re-encoded now (past the deadline, no work slot, over the response's budget or
//! frame size), the partition's records stop before it: the consumer reads the batches
//! before it and fetches again from its offset (an empty partition when it is the
//! first).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kpress_batch::{
    batches, BatchError, Outcome, PassReason, ProduceAllowance, Recompressor, RecordBatch,
    RewritePolicy, Target,
};
use kpress_codec::Codec;

use super::cache::{BatchKey, ReencodedCache};
use super::report::{passes_as_stored, CutReason, PartitionReport, ResponseReport};

/// How long one response's re-encode may take once it has its work slot (the
/// `deadline` of [`ReencodeLimits`]); batches still to re-encode then are cut and the
/// consumer fetches them again. Well inside a consumer's `request.timeout.ms` (30 s by
/// default), which a slower answer would make it give up on; not a setting, as no
/// consumer's timeout is known to kpress and a longer one only delays the retry.
pub(crate) const MAX_REENCODE_TIME: Duration = Duration::from_secs(10);

/// What a response's re-encode may spend: the decompression budget and the frame size
/// come from `[limits]`, the deadline is [`MAX_REENCODE_TIME`] from the work slot.
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
    /// Where re-encoded batches are looked up and kept, if anywhere.
    cache: Option<&'a ReencodedCache>,
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
            cache: None,
            // A Fetch response's batches share one decompression allowance as a
            // Produce request's do; any target codec is allowed.
            allowance: ProduceAllowance::new(true, limits.response_decompressed_bytes),
            limits,
            frame_bytes,
            report: ResponseReport::default(),
        }
    }

    /// This re-encoder, looking batches up in `cache` and keeping those it re-encodes.
    pub(crate) fn with_cache(mut self, cache: &'a ReencodedCache) -> Reencoder<'a> {
        self.cache = Some(cache);
        self
    }

    /// The records of partition `index` of `topic` with every batch in a codec `needs`
    /// names re-encoded by `policy` (whose target is the consumer's codec), or `None`
    /// when no batch needed it.
    pub(crate) fn partition(
        &mut self,
        topic: &str,
        index: i32,
        records: &[u8],
        policy: &RewritePolicy,
        needs: impl Fn(Codec) -> bool,
    ) -> Option<Bytes> {
        // One walk: the batches before the first that needs work are kept as stored,
        // and the loop below starts at it.
        let mut iter = batches(records);
        let start = loop {
            let before = iter.remainder();
            match iter.next()? {
                Ok(batch) if batch.codec().is_some_and(&needs) => {
                    break records.len() - before.len()
                }
                Ok(_) | Err(BatchError::NotMagicV2 { .. }) => {}
                Err(_) => return None,
            }
        };
        let mut out = Vec::with_capacity(records.len());
        out.extend_from_slice(&records[..start]);
        let mut reencoded = Vec::new();
        let mut from_cache = 0;
        let mut passed = Vec::new();
        let mut cut = None;
        let mut iter = batches(&records[start..]);
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
            let bytes_in = batch.bytes().len();
            let result = match self.stop_before_work() {
                None => self.batch(topic, index, &batch, policy),
                // A batch already re-encoded costs no work.
                Some(reason) => self
                    .cache
                    .zip(cache_key(topic, index, &batch, policy))
                    .and_then(|(cache, key)| cache.get(&key))
                    .map(|bytes| (bytes, None))
                    .ok_or(reason),
            };
            match result {
                Ok((bytes, fresh)) => {
                    // Bytes the cut parts of earlier partitions freed are not given
                    // back: the estimate only ever overstates the frame.
                    let grown = (self.frame_bytes + bytes.len()).saturating_sub(bytes_in);
                    if grown > self.limits.max_frame_bytes {
                        cut = Some(CutReason::MaxFrameBytes);
                        break;
                    }
                    self.frame_bytes = grown;
                    out.extend_from_slice(&bytes);
                    match fresh {
                        Some(pair) => reencoded.push(pair),
                        None => from_cache += 1,
                    }
                }
                Err(CutReason::Batch(reason)) if passes_as_stored(reason) => {
                    // The broker's bytes, so the consumer sees what it would directly.
                    out.extend_from_slice(batch.bytes());
                    passed.push(reason);
                }
                Err(reason) => {
                    cut = Some(reason);
                    break;
                }
            }
        }
        self.report.partitions.push(PartitionReport {
            topic: Arc::from(topic),
            bytes_in: records.len(),
            bytes_out: out.len(),
            reencoded,
            from_cache,
            passed,
            cut,
        });
        Some(Bytes::from(out))
    }

    /// One batch re-encoded by `policy`, from the cache when it holds it (keyed by the
    /// stored batch and the target codec), and the codec pair when it was re-encoded
    /// here.
    fn batch(
        &mut self,
        topic: &str,
        index: i32,
        batch: &RecordBatch<'_>,
        policy: &RewritePolicy,
    ) -> Result<(Bytes, Option<(Codec, Codec)>), CutReason> {
        let mut fresh = None;
        let recompressor = &mut *self.recompressor;
        let allowance = &mut self.allowance;
        let mut reencode = || {
            let mut out = Vec::new();
            let mut outcome = None;
            recompressor.rewrite_partition(batch.bytes(), policy, allowance, &mut out, |o, _| {
                outcome = Some(*o)
            });
            match outcome {
                Some(Outcome::Rewritten { from, to, .. }) => {
                    fresh = Some((from, to));
                    Ok(Bytes::from(out))
                }
                Some(Outcome::PassedThrough(reason)) => Err(CutReason::Batch(reason)),
                None => Err(CutReason::Batch(PassReason::Malformed)),
            }
        };
        let bytes = match self.cache.zip(cache_key(topic, index, batch, policy)) {
            Some((cache, key)) => cache.get_or_reencode(&key, reencode)?,
            None => reencode()?,
        };
        Ok((bytes, fresh))
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

/// The cache's name for `batch` (of partition `index` of `topic`) re-encoded by
/// `policy`, when `policy` names a codec: with its level, so batches re-encoded at
/// another level are never handed out for this one.
fn cache_key<'k>(
    topic: &'k str,
    index: i32,
    batch: &RecordBatch<'_>,
    policy: &RewritePolicy,
) -> Option<BatchKey<'k>> {
    match &policy.target {
        Target::Codec { codec, options } => Some(BatchKey {
            topic,
            partition: index,
            base_offset: batch.base_offset(),
            crc: batch.crc(),
            codec: *codec,
            level: match codec {
                Codec::Gzip => options.gzip_level(),
                Codec::Lz4 => options.lz4_level(),
                Codec::Zstd => options.zstd_level(),
                Codec::None | Codec::Snappy => 0,
            },
        }),
        Target::Producer | Target::Unresolved(_) => None,
    }
}

/// Whether some whole batch of `records` is in a codec `needs` names.
pub(crate) fn needs_work(records: &[u8], needs: &impl Fn(Codec) -> bool) -> bool {
    batches(records)
        .filter_map(Result::ok)
        .any(|batch| batch.codec().is_some_and(needs))
}
