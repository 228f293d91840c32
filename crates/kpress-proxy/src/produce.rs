//! The Produce rewrite, run off the async reactor: each partition's records go through
//! kpress-batch's [`Recompressor`] with the topic's policy, within what the request
//! allows ([`ProduceAllowance`]: its version's codecs, one decompression budget for
//! all its batches); every batch's outcome is kept (with its topic) for metrics.

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use bytes::BytesMut;
use kpress_batch::{Outcome, PolicyLookup, ProduceAllowance, Recompressor};
use kpress_protocol::{rewrite_produce_with, ProtocolError, RecordsRewriter};

use crate::metrics;

thread_local! {
    /// Codec state and scratch buffers, reused by every rewrite on this blocking thread,
    /// and the policy they were last pruned for.
    static RECOMPRESSOR: RefCell<(Recompressor, Option<Weak<dyn PolicyLookup>>)> =
        RefCell::new((Recompressor::new(), None));
}

/// What one Produce rewrite did.
#[derive(Debug, Default)]
pub(crate) struct ProduceRewrite {
    /// The new request frame (size prefix, header, body), or `None`: forward the
    /// original.
    pub(crate) frame: Option<BytesMut>,
    /// v13 topic ids kpress had no name for (at most
    /// [`kpress_protocol::MAX_UNKNOWN_TOPIC_IDS`]); their records went untouched.
    pub(crate) unknown_topic_ids: Vec<[u8; 16]>,
    /// Further distinct unknown ids, beyond those listed.
    pub(crate) unknown_topic_ids_omitted: usize,
    /// The rewrite would be a frame over `max_frame_bytes` (it was stopped once its
    /// records alone outgrew it), so `frame` is `None`: forward the original.
    pub(crate) over_max_frame: bool,
    /// Each batch's outcome, grouped by topic in request order.
    pub(crate) outcomes: Vec<(Arc<str>, Vec<Outcome>)>,
}

impl ProduceRewrite {
    /// Counts every batch in the metrics: rewritten ones by topic (as `labels` label
    /// it; `known` says whether a rule or the brokers name a topic) and codecs,
    /// others by reason.
    pub(crate) fn record_metrics(
        &self,
        labels: &metrics::TopicLabels,
        known: impl Fn(&str) -> bool,
    ) {
        for (topic, outcomes) in &self.outcomes {
            let mut label = None;
            for outcome in outcomes {
                match *outcome {
                    Outcome::Rewritten {
                        from,
                        to,
                        bytes_in,
                        bytes_out,
                    } => {
                        let label =
                            label.get_or_insert_with(|| labels.label(topic, || known(topic)));
                        metrics::batch_rewritten(label, from, to, bytes_in, bytes_out);
                        if outcome.grew() {
                            metrics::batch_grown(label, from, to);
                        }
                    }
                    Outcome::PassedThrough(reason) => metrics::batch_passed(reason),
                }
            }
        }
    }

    /// Batches rewritten, for logs.
    pub(crate) fn rewritten_batches(&self) -> usize {
        self.outcomes
            .iter()
            .flat_map(|(_, outcomes)| outcomes)
            .filter(|o| matches!(o, Outcome::Rewritten { .. }))
            .count()
    }
}

/// What bounds one Produce rewrite.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RewriteLimits {
    /// What all the request's batches may decompress to together.
    pub(crate) max_request_decompressed_bytes: usize,
    /// Kafka's frame limit: rewritten records past it could never be sent, so the
    /// rewrite stops there instead of holding more.
    pub(crate) max_frame_bytes: usize,
}

/// Rewrites a Produce request payload (header + body, no size prefix). Blocking: run
/// it on a blocking thread.
pub(crate) fn rewrite_produce(
    payload: &[u8],
    header_len: usize,
    api_version: i16,
    limits: RewriteLimits,
    policies: &Arc<dyn PolicyLookup>,
    topic_name: &dyn Fn(&[u8; 16]) -> Option<Arc<str>>,
) -> Result<ProduceRewrite, ProtocolError> {
    RECOMPRESSOR.with(|cell| {
        // A panic inside a rewrite would poison nothing: `RefCell` is released on unwind.
        let mut held = cell.borrow_mut();
        let (recompressor, pruned_for) = &mut *held;
        // A new policy: compressors of settings no rule uses any more go, with their state.
        // (A `Weak` keeps the old policy's allocation, so a new one never shares its address.)
        if !pruned_for
            .as_ref()
            .is_some_and(|seen| Weak::ptr_eq(seen, &Arc::downgrade(policies)))
        {
            recompressor.retain_compressors(|codec, options| policies.uses(codec, options));
            *pruned_for = Some(Arc::downgrade(policies));
        }
        let mut rewriter = PolicyRewriter {
            policies: &**policies,
            recompressor,
            request: ProduceAllowance::new(api_version, limits.max_request_decompressed_bytes),
            max_records_bytes: limits.max_frame_bytes,
            over_max_frame: false,
            outcomes: Vec::new(),
        };
        let splice =
            rewrite_produce_with(payload, header_len, api_version, topic_name, &mut rewriter)?;
        // Kafka refuses frames over socket.request.max.bytes: neither rewritten records
        // that outgrew it nor a whole new request over it is ever sent.
        let over_max_frame = rewriter.over_max_frame
            || splice
                .payload()
                .is_some_and(|payload| payload.len() > limits.max_frame_bytes);
        Ok(ProduceRewrite {
            frame: splice.frame.filter(|_| !over_max_frame),
            over_max_frame,
            unknown_topic_ids: splice.unknown_topic_ids,
            unknown_topic_ids_omitted: splice.unknown_topic_ids_omitted,
            outcomes: rewriter.outcomes,
        })
    })
}

struct PolicyRewriter<'a> {
    policies: &'a dyn PolicyLookup,
    recompressor: &'a mut Recompressor,
    request: ProduceAllowance,
    /// Rewritten records held at most before the rewrite gives up.
    max_records_bytes: usize,
    over_max_frame: bool,
    outcomes: Vec<(Arc<str>, Vec<Outcome>)>,
}

/// The outcome list of `topic`: the last one if the previous partition was of the same
/// topic (requests group partitions by topic), else a new one.
fn topic_outcomes<'a>(
    outcomes: &'a mut Vec<(Arc<str>, Vec<Outcome>)>,
    topic: &str,
) -> &'a mut Vec<Outcome> {
    let same_topic = matches!(outcomes.last(), Some((last, _)) if &**last == topic);
    if !same_topic {
        outcomes.push((Arc::from(topic), Vec::new()));
    }
    let last = outcomes.len() - 1;
    &mut outcomes[last].1
}

impl RecordsRewriter for PolicyRewriter<'_> {
    fn rewrite_records(&mut self, topic: &str, records: &[u8], out: &mut Vec<u8>) -> bool {
        if self.over_max_frame {
            return false;
        }
        let policy = self.policies.policy_for(topic);
        let outcomes = topic_outcomes(&mut self.outcomes, topic);
        let first = outcomes.len();
        self.recompressor.rewrite_partition(
            records,
            policy,
            &mut self.request,
            out,
            |outcome, _| outcomes.push(*outcome),
        );
        if out.len() > self.max_records_bytes {
            self.over_max_frame = true;
            return false;
        }
        outcomes[first..]
            .iter()
            .any(|o| matches!(o, Outcome::Rewritten { .. }))
    }
}

impl std::fmt::Debug for PolicyRewriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyRewriter")
            .field("request", &self.request)
            .field("outcomes", &self.outcomes)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kpress_batch::builder::{BatchBuilder, Record};
    use kpress_batch::RewritePolicy;
    use kpress_codec::{Codec, CompressionOptions};

    /// A Produce v7 payload (header v1 with client id "t", no size prefix) of one
    /// batch for topic "t" partition 0, and its header length.
    fn produce_v7(batch: &[u8]) -> (Vec<u8>, usize) {
        let mut payload = Vec::new();
        payload.extend_from_slice(&0i16.to_be_bytes()); // Produce
        payload.extend_from_slice(&7i16.to_be_bytes());
        payload.extend_from_slice(&1i32.to_be_bytes());
        payload.extend_from_slice(&1i16.to_be_bytes());
        payload.push(b't');
        let header_len = payload.len();
        payload.extend_from_slice(&(-1i16).to_be_bytes()); // no transactional id
        payload.extend_from_slice(&1i16.to_be_bytes()); // acks
        payload.extend_from_slice(&30_000i32.to_be_bytes());
        payload.extend_from_slice(&1i32.to_be_bytes()); // one topic
        payload.extend_from_slice(&1i16.to_be_bytes());
        payload.push(b't');
        payload.extend_from_slice(&1i32.to_be_bytes()); // one partition
        payload.extend_from_slice(&0i32.to_be_bytes());
        payload.extend_from_slice(&(batch.len() as i32).to_be_bytes());
        payload.extend_from_slice(batch);
        (payload, header_len)
    }

    fn compressors_held() -> usize {
        RECOMPRESSOR.with(|cell| cell.borrow().0.compressors_held())
    }

    #[test]
    fn compressors_no_policy_uses_are_dropped_when_the_policy_changes() {
        let records: Vec<Record> = (0..100)
            .map(|i| Record::value(format!("record {i} of a batch worth compressing").into_bytes()))
            .collect();
        let batch = BatchBuilder::codec(Codec::Gzip).build(&records).unwrap();
        let (payload, header_len) = produce_v7(&batch);
        let limits = RewriteLimits {
            max_request_decompressed_bytes: 1 << 20,
            max_frame_bytes: 1 << 20,
        };
        let rewrite = |policy: &Arc<dyn PolicyLookup>| {
            let rewrite =
                rewrite_produce(&payload, header_len, 7, limits, policy, &|_| None).unwrap();
            assert!(rewrite.frame.is_some(), "rewritten");
        };
        let zstd: Arc<dyn PolicyLookup> = Arc::new(RewritePolicy::to_codec(
            Codec::Zstd,
            CompressionOptions::default(),
        ));
        let lz4: Arc<dyn PolicyLookup> = Arc::new(RewritePolicy::to_codec(
            Codec::Lz4,
            CompressionOptions::default(),
        ));
        rewrite(&zstd);
        assert_eq!(compressors_held(), 1);
        rewrite(&zstd);
        assert_eq!(compressors_held(), 1);
        // The zstd compressor goes with the policy that used it.
        rewrite(&lz4);
        assert_eq!(compressors_held(), 1);
        // A new snapshot of the same settings keeps the compressor it uses.
        let lz4_again: Arc<dyn PolicyLookup> = Arc::new(RewritePolicy::to_codec(
            Codec::Lz4,
            CompressionOptions::default(),
        ));
        rewrite(&lz4_again);
        assert_eq!(compressors_held(), 1);
    }
}
