//! The Produce rewrite engine, run off the async reactor: each partition's records go
//! through kpress-batch's [`Recompressor`] with the topic's policy, within what the
//! request allows ([`ProduceAllowance`]: its version's codecs, one decompression budget
//! for all its batches); every batch's outcome is kept (with its topic) for metrics, in
//! [`BatchReports`]. A request none of whose batches takes codec work is classified on
//! the caller's thread instead ([`try_without_codec_work`]), with the same reports.

use std::cell::RefCell;
use std::ops::Range;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use kpress_batch::{
    pass_without_codec_work, Outcome, PassReason, PolicyLookup, ProduceAllowance, Recompressor,
    RewritePolicy, Target,
};
use kpress_protocol::{produce_allows_zstd, rewrite_produce_with, ProtocolError, RecordsRewriter};

use super::reports::{BatchReport, BatchReports, ShadowSamples};
use crate::apis::log_limiter::LogLimiter;
use crate::policy::PolicySnapshot;

thread_local! {
    /// Codec state and scratch buffers, reused by every rewrite on this blocking thread,
    /// and the policy they were last pruned for.
    static RECOMPRESSOR: RefCell<(Recompressor, Option<Weak<dyn PolicyLookup>>)> =
        RefCell::new((Recompressor::new(), None));
}

/// What one Produce rewrite did.
#[derive(Debug)]
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
    /// What became of each batch, and the samples for the shadow trials.
    pub(crate) reports: BatchReports,
}

/// Codec failures are logged at most once per reason per 10 s.
static CODEC_FAILURE_LOG: LogLimiter = LogLimiter::new(Duration::from_secs(10));

/// Logs the codec's error behind a batch kpress could not decode or encode.
fn log_codec_failure(topic: &str, reason: PassReason, recompressor: &mut Recompressor) {
    let Some(error) = recompressor.take_codec_error() else {
        return;
    };
    if let Some(suppressed) = CODEC_FAILURE_LOG.admit(reason, Instant::now()) {
        tracing::warn!(
            topic,
            reason = reason.as_str(),
            %error,
            suppressed,
            "batch forwarded untouched: its codec failed (suppressed: lines like it held back in the last 10 s)"
        );
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

/// Which of the rules' policies a rewrite applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Under {
    /// Each topic's policy.
    Normal,
    /// Each topic's fallback: its rewrite could not start within the wait limit.
    Overload,
}

/// The rules' policies under overload, looked up as any policy is.
struct OverloadPolicies<'a>(&'a dyn PolicyLookup);

impl PolicyLookup for OverloadPolicies<'_> {
    fn policy_for(&self, topic: &str) -> &RewritePolicy {
        self.0.overload_policy_for(topic)
    }

    fn has_rule_for(&self, topic: &str) -> bool {
        self.0.has_rule_for(topic)
    }

    fn uses(&self, codec: kpress_codec::Codec, options: &kpress_codec::CompressionOptions) -> bool {
        self.0.uses(codec, options)
    }
}

/// Whether some topic of `reports` has a fallback other than passing as sent.
pub(crate) fn has_fallback_work(rules: &dyn PolicyLookup, reports: &BatchReports) -> bool {
    reports
        .outcomes
        .iter()
        .any(|(topic, _)| !matches!(rules.overload_policy_for(topic).target, Target::Producer))
}

/// Rewrites a Produce request payload (header + body, no size prefix) `under` the
/// rules' normal or overload policies. Blocking: run it on a blocking thread.
pub(crate) fn rewrite_produce(
    payload: &[u8],
    header_len: usize,
    api_version: i16,
    limits: RewriteLimits,
    policy: &PolicySnapshot,
    under: Under,
    topic_name: &dyn Fn(&[u8; 16]) -> Option<Arc<str>>,
) -> Result<ProduceRewrite, ProtocolError> {
    let rules = &policy.rules;
    let overload_policies = OverloadPolicies(&**rules);
    let lookup: &dyn PolicyLookup = match under {
        Under::Normal => &**rules,
        Under::Overload => &overload_policies,
    };
    RECOMPRESSOR.with(|cell| {
        // A panic inside a rewrite would poison nothing: `RefCell` is released on unwind.
        let mut held = cell.borrow_mut();
        let (recompressor, pruned_for) = &mut *held;
        // New rules: compressors of settings no rule uses any more go, with their state.
        // (A `Weak` keeps the old rules' allocation, so new ones never share its address.)
        if !pruned_for
            .as_ref()
            .is_some_and(|seen| Weak::ptr_eq(seen, &Arc::downgrade(rules)))
        {
            recompressor.retain_compressors(|codec, options| rules.uses(codec, options));
            *pruned_for = Some(Arc::downgrade(rules));
        }
        let mut rewriter = PolicyRewriter {
            // Under overload no CPU goes to sampling for the trials.
            shadow: policy
                .shadow
                .clone()
                .filter(|_| under == Under::Normal)
                .map(ShadowSamples::new),
            rules: lookup,
            recompressor,
            request: ProduceAllowance::new(
                produce_allows_zstd(api_version),
                limits.max_request_decompressed_bytes,
            ),
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
        let shadow = rewriter.shadow.filter(|shadow| !shadow.samples.is_empty());
        Ok(ProduceRewrite {
            frame: splice.frame.filter(|_| !over_max_frame),
            over_max_frame,
            unknown_topic_ids: splice.unknown_topic_ids,
            unknown_topic_ids_omitted: splice.unknown_topic_ids_omitted,
            reports: BatchReports {
                outcomes: rewriter.outcomes,
                shadow,
                overloaded: under == Under::Overload,
            },
        })
    })
}

struct PolicyRewriter<'a> {
    /// The snapshot's shadow trials, and the batches sampled for them.
    shadow: Option<ShadowSamples>,
    /// The snapshot's rules.
    rules: &'a dyn PolicyLookup,
    recompressor: &'a mut Recompressor,
    request: ProduceAllowance,
    /// Rewritten records held at most before the rewrite gives up.
    max_records_bytes: usize,
    over_max_frame: bool,
    outcomes: Vec<(Arc<str>, Vec<BatchReport>)>,
}

/// The name and report list of `topic`: the last one if the previous partition was of
/// the same topic (requests group partitions by topic), else a new one.
fn topic_outcomes<'a>(
    outcomes: &'a mut Vec<(Arc<str>, Vec<BatchReport>)>,
    topic: &str,
) -> (&'a Arc<str>, &'a mut Vec<BatchReport>) {
    let same_topic = matches!(outcomes.last(), Some((last, _)) if &**last == topic);
    if !same_topic {
        outcomes.push((Arc::from(topic), Vec::new()));
    }
    let last = outcomes.len() - 1;
    let (name, reports) = &mut outcomes[last];
    (name, reports)
}

impl RecordsRewriter for PolicyRewriter<'_> {
    fn rewrite_records(&mut self, topic: &str, records: &[u8], out: &mut Vec<u8>) -> bool {
        let (name, reports) = topic_outcomes(&mut self.outcomes, topic);
        if let Some(shadow) = &mut self.shadow {
            shadow.sample(name, records);
        }
        if self.over_max_frame {
            reports.push(BatchReport::untried(records));
            return false;
        }
        let policy = self.rules.policy_for(topic);
        let (recompressor, request) = (&mut *self.recompressor, &mut self.request);
        let report = BatchReport::attempt(records, policy, || {
            let mut outcome = None;
            recompressor
                .rewrite_partition(records, policy, request, out, |o, _| outcome = Some(*o));
            outcome
        });
        let outcome = report.outcome;
        reports.push(report);
        if let Some(Outcome::PassedThrough(
            reason @ (PassReason::DecompressFailed | PassReason::CompressFailed),
        )) = outcome
        {
            log_codec_failure(topic, reason, self.recompressor);
        }
        if out.len() > self.max_records_bytes {
            self.over_max_frame = true;
            return false;
        }
        matches!(outcome, Some(Outcome::Rewritten { .. }))
    }
}

/// Classifies a Produce request payload on the caller's thread when none of its batches
/// takes codec work: each by what precedes the codec (framing, header, CRC), with the
/// reports and shadow samples [`rewrite_produce`] would give; the original goes on.
/// `None` when a batch takes codec work, a v13 topic id has no name yet, or the request
/// does not parse: [`rewrite_produce`] handles it then.
pub(crate) fn try_without_codec_work(
    payload: &[u8],
    header_len: usize,
    api_version: i16,
    limits: RewriteLimits,
    policy: &PolicySnapshot,
    topic_name: &dyn Fn(&[u8; 16]) -> Option<Arc<str>>,
) -> Option<BatchReports> {
    let mut checker = PassChecker {
        rules: &*policy.rules,
        request: ProduceAllowance::new(
            produce_allows_zstd(api_version),
            limits.max_request_decompressed_bytes,
        ),
        payload,
        stopped: false,
        outcomes: Vec::new(),
        partitions: Vec::new(),
    };
    let splice =
        rewrite_produce_with(payload, header_len, api_version, topic_name, &mut checker).ok()?;
    if checker.stopped
        || !splice.unknown_topic_ids.is_empty()
        || splice.unknown_topic_ids_omitted > 0
    {
        return None;
    }
    // Sampled only now that every batch is known to pass, so a request that goes to
    // `rewrite_produce` after all is sampled once, there.
    let shadow = policy.shadow.clone().and_then(|trials| {
        let mut shadow = ShadowSamples::new(trials);
        for (topic, records) in &checker.partitions {
            shadow.sample(topic, &payload[records.clone()]);
        }
        (!shadow.samples.is_empty()).then_some(shadow)
    });
    Some(BatchReports {
        outcomes: checker.outcomes,
        shadow,
        overloaded: false,
    })
}

/// Classifies each partition without codec work; stops at the first that takes some.
struct PassChecker<'a> {
    rules: &'a dyn PolicyLookup,
    request: ProduceAllowance,
    payload: &'a [u8],
    /// A partition takes codec work (or its records could not be placed in the payload).
    stopped: bool,
    outcomes: Vec<(Arc<str>, Vec<BatchReport>)>,
    /// Each partition's topic and records (a range of the payload), for the shadow trials.
    partitions: Vec<(Arc<str>, Range<usize>)>,
}

/// Where `part` lies in `whole`, if it is a subslice of it.
fn subslice_range(whole: &[u8], part: &[u8]) -> Option<Range<usize>> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    let end = start.checked_add(part.len())?;
    (end <= whole.len()).then_some(start..end)
}

impl RecordsRewriter for PassChecker<'_> {
    fn rewrite_records(&mut self, topic: &str, records: &[u8], _out: &mut Vec<u8>) -> bool {
        if self.stopped {
            return false;
        }
        let Some(range) = subslice_range(self.payload, records) else {
            self.stopped = true;
            return false;
        };
        let policy = self.rules.policy_for(topic);
        let request = &self.request;
        let report = BatchReport::attempt(records, policy, || {
            pass_without_codec_work(records, policy, request).map(Outcome::PassedThrough)
        });
        if report.outcome.is_none() {
            self.stopped = true;
            return false;
        }
        let (name, reports) = topic_outcomes(&mut self.outcomes, topic);
        self.partitions.push((Arc::clone(name), range));
        reports.push(report);
        false
    }
}

/// A Produce request's batches as sent, each untried, by topic, read from the request's
/// framing and batch headers only (no CRC, no codec): what is counted when the request
/// goes on without a rewrite attempt.
#[derive(Debug)]
pub(crate) struct Survey {
    pub(crate) reports: BatchReports,
    /// v13 topic ids without a name (their batches are in no report).
    pub(crate) unknown_topic_ids: usize,
}

/// Surveys a Produce request payload (header + body, no size prefix).
pub(crate) fn survey(
    payload: &[u8],
    header_len: usize,
    api_version: i16,
    topic_name: &dyn Fn(&[u8; 16]) -> Option<Arc<str>>,
) -> Survey {
    let mut surveyor = Surveyor {
        outcomes: Vec::new(),
    };
    // A request that does not parse is the rewrite's to report.
    let unknown_topic_ids =
        rewrite_produce_with(payload, header_len, api_version, topic_name, &mut surveyor)
            .map_or(0, |splice| {
                splice.unknown_topic_ids.len() + splice.unknown_topic_ids_omitted
            });
    Survey {
        reports: BatchReports {
            outcomes: surveyor.outcomes,
            shadow: None,
            overloaded: false,
        },
        unknown_topic_ids,
    }
}

struct Surveyor {
    outcomes: Vec<(Arc<str>, Vec<BatchReport>)>,
}

impl RecordsRewriter for Surveyor {
    fn rewrite_records(&mut self, topic: &str, records: &[u8], _out: &mut Vec<u8>) -> bool {
        let (_, reports) = topic_outcomes(&mut self.outcomes, topic);
        reports.push(BatchReport::untried(records));
        false
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
    use crate::shadow::ShadowTrials;
    use kpress_batch::builder::{BatchBuilder, Record};
    use kpress_batch::{RewritePolicy, Target};
    use kpress_codec::{Codec, CompressionOptions};
    use kpress_measure::thread_cpu_time;

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

    const LIMITS: RewriteLimits = RewriteLimits {
        max_request_decompressed_bytes: 1 << 20,
        max_frame_bytes: 1 << 20,
    };

    /// A gzip batch of `n` short, compressible records.
    fn gzip_batch(n: usize) -> Vec<u8> {
        let records: Vec<Record> = (0..n)
            .map(|i| Record::value(format!("record {i} of a batch worth compressing").into_bytes()))
            .collect();
        BatchBuilder::codec(Codec::Gzip).build(&records).unwrap()
    }

    #[test]
    fn a_survey_counts_every_batch_untried_and_names_the_largest_topic() {
        let (payload, header_len) = produce_v7(&gzip_batch(20));
        let survey = survey(&payload, header_len, 7, &|_| None);
        assert_eq!(survey.unknown_topic_ids, 0);
        let [(topic, reports)] = &survey.reports.outcomes[..] else {
            panic!("one topic: {:?}", survey.reports.outcomes);
        };
        assert_eq!(&**topic, "t");
        assert_eq!(reports.len(), 1);
        assert!(reports[0].outcome.is_none());
        assert_eq!(reports[0].records, 20);
        assert_eq!(survey.reports.largest_topic().as_deref(), Some("t"));
        // Several topics: the one with the most bytes, summed over its partitions,
        // the first of equals.
        let report = |bytes_in| BatchReport {
            bytes_in,
            ..BatchReport::untried(&[])
        };
        let reports = BatchReports {
            outcomes: vec![
                (Arc::from("a"), vec![report(300)]),
                (Arc::from("b"), vec![report(200), report(150)]),
                (Arc::from("a"), vec![report(10)]),
                (Arc::from("c"), vec![report(340)]),
            ],
            shadow: None,
            overloaded: false,
        };
        assert_eq!(reports.largest_topic().as_deref(), Some("b"));
        let tied = BatchReports {
            outcomes: vec![
                (Arc::from("x"), vec![report(10)]),
                (Arc::from("y"), vec![report(10)]),
            ],
            shadow: None,
            overloaded: false,
        };
        assert_eq!(tied.largest_topic().as_deref(), Some("x"));
        assert_eq!(BatchReports::default().largest_topic(), None);
    }

    fn compressors_held() -> usize {
        RECOMPRESSOR.with(|cell| cell.borrow().0.compressors_held())
    }

    #[test]
    fn compressors_no_policy_uses_are_dropped_when_the_policy_changes() {
        let (payload, header_len) = produce_v7(&gzip_batch(100));
        let limits = LIMITS;
        let rewrite = |rules: &Arc<dyn PolicyLookup>| {
            let policy = PolicySnapshot::rules_only(Arc::clone(rules));
            let rewrite = rewrite_produce(
                &payload,
                header_len,
                7,
                limits,
                &policy,
                Under::Normal,
                &|_| None,
            )
            .unwrap();
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

    #[test]
    fn thread_cpu_time_advances_with_work() {
        let start = thread_cpu_time();
        let mut x = 0u64;
        for _ in 0..20_000_000 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        assert!(thread_cpu_time() > start, "{x}");
    }

    #[test]
    fn shadow_trials_copy_the_batch_as_sent_and_change_nothing_forwarded() {
        let batch = gzip_batch(50);
        let (payload, header_len) = produce_v7(&batch);
        let zstd: Arc<dyn PolicyLookup> = Arc::new(RewritePolicy::to_codec(
            Codec::Zstd,
            CompressionOptions::default(),
        ));
        let rewrite = |policy: &PolicySnapshot| {
            rewrite_produce(
                &payload,
                header_len,
                7,
                LIMITS,
                policy,
                Under::Normal,
                &|_| None,
            )
            .unwrap()
        };
        let without = rewrite(&PolicySnapshot::rules_only(Arc::clone(&zstd)));
        assert!(without.reports.shadow.is_none());
        let settings = kpress_config::ShadowSettings {
            sample: 1.0,
            candidates: vec!["lz4:9".parse().unwrap()],
            max_cpu_fraction: 1.0,
            threads: 1,
            max_queue_bytes: 1 << 20,
        };
        let trials =
            ShadowTrials::start(&settings, &kpress_config::Limits::default()).expect("started");
        let with = rewrite(&PolicySnapshot {
            rules: zstd,
            shadow: Some(trials),
            consumers: Default::default(),
        });
        assert_eq!(with.frame, without.frame);
        let samples = with.reports.shadow.expect("sampled");
        let [(topic, sample)] = &samples.samples[..] else {
            panic!("{:?}", samples.samples)
        };
        assert_eq!(&**topic, "t");
        assert_eq!(sample.bytes(), &batch[..]);
    }

    /// Each partition's topic, bytes, records and outcome, for comparing reports.
    fn reported(reports: &BatchReports) -> Vec<(String, usize, u64, Option<Outcome>)> {
        reports
            .outcomes
            .iter()
            .flat_map(|(topic, reports)| {
                reports
                    .iter()
                    .map(|r| (topic.to_string(), r.bytes_in, r.records, r.outcome))
            })
            .collect()
    }

    #[test]
    fn a_request_without_codec_work_is_reported_as_the_rewrite_reports_it() {
        let batch = gzip_batch(50);
        let (payload, header_len) = produce_v7(&batch);
        let policy_of = |target: Target| {
            let rules: Arc<dyn PolicyLookup> = Arc::new(RewritePolicy {
                target,
                ..RewritePolicy::default()
            });
            PolicySnapshot::rules_only(rules)
        };
        let to = |codec| Target::Codec {
            codec,
            options: CompressionOptions::default(),
        };
        // Kept as sent, whether by the policy or because it is in the target codec already.
        for policy in [policy_of(Target::Producer), policy_of(to(Codec::Gzip))] {
            let inline =
                try_without_codec_work(&payload, header_len, 7, LIMITS, &policy, &|_| None)
                    .expect("no codec work");
            let rewrite = rewrite_produce(
                &payload,
                header_len,
                7,
                LIMITS,
                &policy,
                Under::Normal,
                &|_| None,
            )
            .unwrap();
            // The inline classification forwards the original, as the rewrite does here.
            assert!(rewrite.frame.is_none() && !rewrite.over_max_frame);
            assert_eq!(reported(&inline), reported(&rewrite.reports));
            assert!(matches!(
                reported(&inline)[..],
                [(_, bytes, 50, Some(Outcome::PassedThrough(_)))] if bytes == batch.len()
            ));
        }
        // Into zstd: codec work, left to the rewrite.
        let zstd = policy_of(to(Codec::Zstd));
        assert!(
            try_without_codec_work(&payload, header_len, 7, LIMITS, &zstd, &|_| None).is_none()
        );
        // Produce v3-v6 cannot carry zstd: nothing to do.
        let (v6, header_len) = {
            let (mut payload, header_len) = produce_v7(&batch);
            payload[3] = 6;
            (payload, header_len)
        };
        let inline = try_without_codec_work(&v6, header_len, 6, LIMITS, &zstd, &|_| None)
            .expect("no codec work");
        assert!(matches!(
            reported(&inline)[..],
            [(
                _,
                _,
                _,
                Some(Outcome::PassedThrough(PassReason::ZstdNeedsProduceV7))
            )]
        ));
        // Not parsed: the rewrite reports it.
        assert!(try_without_codec_work(
            &payload[..payload.len() - 1],
            header_len,
            7,
            LIMITS,
            &zstd,
            &|_| None
        )
        .is_none());
    }

    #[test]
    fn a_request_without_codec_work_is_sampled_for_the_shadow_trials_once() {
        let batch = gzip_batch(50);
        let (payload, header_len) = produce_v7(&batch);
        let settings = kpress_config::ShadowSettings {
            sample: 1.0,
            candidates: vec!["lz4:9".parse().unwrap()],
            max_cpu_fraction: 1.0,
            threads: 1,
            max_queue_bytes: 1 << 20,
        };
        let trials =
            ShadowTrials::start(&settings, &kpress_config::Limits::default()).expect("started");
        let rules: Arc<dyn PolicyLookup> = Arc::new(RewritePolicy::to_codec(
            Codec::Gzip,
            CompressionOptions::default(),
        ));
        let inline = try_without_codec_work(
            &payload,
            header_len,
            7,
            LIMITS,
            &PolicySnapshot {
                rules: Arc::clone(&rules),
                shadow: Some(trials.clone()),
                consumers: Default::default(),
            },
            &|_| None,
        )
        .expect("no codec work");
        let samples = inline.shadow.expect("sampled");
        let [(topic, sample)] = &samples.samples[..] else {
            panic!("{:?}", samples.samples)
        };
        assert_eq!(&**topic, "t");
        assert_eq!(sample.bytes(), &batch[..]);
        // A request left to the rewrite is not sampled before it gets there.
        let zstd: Arc<dyn PolicyLookup> = Arc::new(RewritePolicy::to_codec(
            Codec::Zstd,
            CompressionOptions::default(),
        ));
        let policy = PolicySnapshot {
            rules: zstd,
            shadow: Some(trials),
            consumers: Default::default(),
        };
        assert!(
            try_without_codec_work(&payload, header_len, 7, LIMITS, &policy, &|_| None).is_none()
        );
    }

    #[test]
    fn every_partition_is_reported_with_its_bytes_records_and_outcome() {
        let batch = gzip_batch(50);
        let (payload, header_len) = produce_v7(&batch);
        let limits = LIMITS;
        let zstd: Arc<dyn PolicyLookup> = Arc::new(RewritePolicy::to_codec(
            Codec::Zstd,
            CompressionOptions::default(),
        ));
        let policy = PolicySnapshot::rules_only(zstd);
        let rewrite = rewrite_produce(
            &payload,
            header_len,
            7,
            limits,
            &policy,
            Under::Normal,
            &|_| None,
        )
        .unwrap();
        assert_eq!(rewrite.reports.outcomes.len(), 1);
        let (topic, reports) = &rewrite.reports.outcomes[0];
        assert_eq!(&**topic, "t");
        let [report] = reports[..] else {
            panic!("{reports:?}")
        };
        assert_eq!((report.bytes_in, report.records), (batch.len(), 50));
        assert!(
            matches!(report.outcome, Some(Outcome::Rewritten { from: Codec::Gzip, to: Codec::Zstd, bytes_in, .. }) if bytes_in == batch.len()),
            "{report:?}"
        );
        assert_eq!(rewrite.reports.rewritten_batches(), 1);
    }

    #[test]
    fn under_overload_each_topic_takes_its_fallback_and_is_reported_so() {
        let batch = gzip_batch(50);
        let (payload, header_len) = produce_v7(&batch);
        let rules: Arc<dyn PolicyLookup> = Arc::new(crate::test_policies::WithFallback::codecs(
            Codec::Zstd,
            Codec::Lz4,
        ));
        let policy = PolicySnapshot::rules_only(Arc::clone(&rules));
        let to = |under| {
            let rewrite =
                rewrite_produce(&payload, header_len, 7, LIMITS, &policy, under, &|_| None)
                    .unwrap();
            let [(_, reports)] = &rewrite.reports.outcomes[..] else {
                panic!("{:?}", rewrite.reports.outcomes)
            };
            match reports[0].outcome {
                Some(Outcome::Rewritten { to, .. }) => (to, rewrite.reports.overloaded),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(to(Under::Normal), (Codec::Zstd, false));
        assert_eq!(to(Under::Overload), (Codec::Lz4, true));
        let surveyed = survey(&payload, header_len, 7, &|_| None).reports;
        assert!(has_fallback_work(&*rules, &surveyed));
        // A lookup without fallbacks passes as sent under overload: no work to do.
        let plain = RewritePolicy::to_codec(Codec::Zstd, CompressionOptions::default());
        assert!(!has_fallback_work(&plain, &surveyed));
    }
}
