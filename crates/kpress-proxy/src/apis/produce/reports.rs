//! What a Produce request's batches became, for its metrics, and the batches sampled
//! for the shadow trials.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kpress_batch::{batches, Outcome, PolicyLookup, RewritePolicy, TargetSource};
use kpress_measure::thread_cpu_time;

use super::metrics::{self, BatchCount, BatchFate};
use crate::autopilot::Collector;
use crate::shadow::{Sample, ShadowTrials};
use crate::topic_labels::TopicLabels;

/// What became of a Produce request's batches, for metrics, and the batches sampled
/// for the shadow trials.
#[derive(Debug, Default)]
pub(crate) struct BatchReports {
    /// Each batch's report, grouped by topic in request order.
    pub(crate) outcomes: Vec<(Arc<str>, Vec<BatchReport>)>,
    /// Batches sampled for the shadow trials, copied as the producer sent them.
    pub(crate) shadow: Option<ShadowSamples>,
    /// Rewritten under overload, at the rules' fallback settings: a batch rewritten
    /// counts as `overloaded_fallback`, one left as sent as `overloaded_passed`.
    pub(crate) overloaded: bool,
}

/// A request's samples for the shadow trials of the snapshot it was rewritten under.
#[derive(Debug)]
pub(crate) struct ShadowSamples {
    trials: ShadowTrials,
    pub(super) samples: Vec<(Arc<str>, Sample)>,
}

impl ShadowSamples {
    pub(super) fn new(trials: ShadowTrials) -> ShadowSamples {
        ShadowSamples {
            trials,
            samples: Vec::new(),
        }
    }

    /// Copies the batches of `topic`'s `records` that the trials pick.
    pub(super) fn sample(&mut self, topic: &Arc<str>, records: &[u8]) {
        let mut picked = Vec::new();
        self.trials.sample(topic, records, &mut picked);
        self.samples
            .extend(picked.into_iter().map(|s| (Arc::clone(topic), s)));
    }
}

/// What became of one partition's records field, and what it cost.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchReport {
    /// `None`: not tried, the rewrite had already outgrown `max_frame_bytes`.
    pub(crate) outcome: Option<Outcome>,
    /// The records field's bytes as the client sent them.
    pub(crate) bytes_in: usize,
    /// Its batches' `recordsCount`s.
    pub(crate) records: u64,
    /// This thread's CPU time and the wall time of the attempt.
    pub(crate) cpu: Duration,
    pub(crate) wall: Duration,
}

impl BatchReport {
    /// A partition not tried.
    pub(super) fn untried(records: &[u8]) -> BatchReport {
        BatchReport {
            outcome: None,
            bytes_in: records.len(),
            records: records_declared(records),
            cpu: Duration::ZERO,
            wall: Duration::ZERO,
        }
    }

    /// A partition with `attempt`'s outcome under `policy`, and its cost.
    pub(super) fn attempt(
        records: &[u8],
        policy: &RewritePolicy,
        attempt: impl FnOnce() -> Option<Outcome>,
    ) -> BatchReport {
        let mut report = BatchReport::untried(records);
        // A batch the policy keeps as sent costs a header check: no CPU clock reads for
        // it (reading the thread CPU clock costs about 0.5 µs).
        let timed = !policy.target.keeps_batches();
        let cpu_start = if timed {
            thread_cpu_time()
        } else {
            Duration::ZERO
        };
        let wall_start = Instant::now();
        report.outcome = attempt();
        report.wall = wall_start.elapsed();
        if timed {
            report.cpu = thread_cpu_time().saturating_sub(cpu_start);
        }
        report
    }
}

impl BatchReports {
    /// Queues the sampled batches for the shadow trials, labelled by topic (as
    /// `labels` label it; `known` says whether a rule or the brokers name a topic).
    pub(crate) fn send_shadow_samples(
        &mut self,
        labels: &TopicLabels,
        known: impl Fn(&str) -> bool,
    ) {
        if let Some(ShadowSamples { trials, samples }) = self.shadow.take() {
            for (topic, sample) in samples {
                let label = labels.label(&topic, || known(&topic));
                trials.send(label, sample);
            }
        }
    }

    /// The rewrite CPU each topic's batches took, for topics that took some.
    pub(crate) fn cpu_by_topic(&self) -> impl Iterator<Item = (&str, Duration)> {
        self.outcomes.iter().filter_map(|(topic, reports)| {
            let cpu: Duration = reports.iter().map(|r| r.cpu).sum();
            (!cpu.is_zero()).then_some((&**topic, cpu))
        })
    }

    /// Counts every batch in the metrics by topic (labelled as for
    /// [`send_shadow_samples`](Self::send_shadow_samples)). `dropped`: the rewritten
    /// request was not sent (the original went on), so every batch is counted with that
    /// outcome and unchanged bytes, and the rewrite-only counters skip it.
    pub(crate) fn record_metrics(
        &self,
        labels: &TopicLabels,
        known: impl Fn(&str) -> bool,
        dropped: Option<BatchFate>,
    ) {
        for (topic, reports) in &self.outcomes {
            let series = metrics::topic_series(&labels.label(topic, || known(topic)));
            let mut cpu = Duration::ZERO;
            for report in reports {
                cpu += report.cpu;
                let (fate, bytes_out) = match (dropped, report.outcome) {
                    (Some(fate), _) => (fate, report.bytes_in),
                    (None, Some(Outcome::PassedThrough(_))) if self.overloaded => {
                        metrics::batches_overloaded(1);
                        (BatchFate::Overloaded, report.bytes_in)
                    }
                    // Only a rewrite over max_frame_bytes stops trying, and then it is dropped.
                    (None, None) => (BatchFate::DroppedOverMaxFrame, report.bytes_in),
                    (
                        None,
                        Some(
                            outcome @ Outcome::Rewritten {
                                from,
                                to,
                                bytes_in,
                                bytes_out,
                            },
                        ),
                    ) => {
                        series.rewritten(from, to, bytes_in, bytes_out, outcome.grew());
                        metrics::rewrite_time(from, to, report.wall);
                        let fate = if self.overloaded {
                            BatchFate::OverloadedFallback
                        } else if outcome.grew() {
                            BatchFate::Grown
                        } else {
                            BatchFate::Rewritten
                        };
                        (fate, bytes_out)
                    }
                    (None, Some(Outcome::PassedThrough(reason))) => {
                        metrics::batch_passed(reason);
                        (BatchFate::Passed(reason), report.bytes_in)
                    }
                };
                series.count(BatchCount {
                    fate,
                    bytes_in: report.bytes_in,
                    bytes_out,
                    records: report.records,
                });
            }
            series.cpu_time(cpu);
        }
    }

    /// Batches rewritten, for logs.
    pub(crate) fn rewritten_batches(&self) -> usize {
        self.outcomes
            .iter()
            .flat_map(|(_, reports)| reports)
            .filter(|r| matches!(r.outcome, Some(Outcome::Rewritten { .. })))
            .count()
    }
}

/// Records of every v2 batch in a records field, as their headers declare (the
/// broker checks them); magic 0/1 entries and an unparseable tail add none.
fn records_declared(records: &[u8]) -> u64 {
    batches(records)
        .map_while(Result::ok)
        .map(|batch| u64::try_from(batch.records_count()).unwrap_or(0))
        .sum()
}

impl BatchReports {
    /// The topic whose batches hold the most bytes (the first of equals), if any: the
    /// lane a request naming several topics waits in for a work slot.
    pub(crate) fn largest_topic(&self) -> Option<Arc<str>> {
        let mut totals: Vec<(&Arc<str>, usize)> = Vec::new();
        for (topic, reports) in &self.outcomes {
            let bytes: usize = reports.iter().map(|r| r.bytes_in).sum();
            match totals.iter_mut().find(|(t, _)| *t == topic) {
                Some((_, total)) => *total += bytes,
                None => totals.push((topic, bytes)),
            }
        }
        let mut largest: Option<(&Arc<str>, usize)> = None;
        for (topic, bytes) in totals {
            if largest.is_none_or(|(_, most)| bytes > most) {
                largest = Some((topic, bytes));
            }
        }
        largest.map(|(topic, _)| Arc::clone(topic))
    }
}

/// Counts a Produce request's batches, given per topic, by where their target came
/// from; an auto topic's bytes (as sent) also go to the autopilot's `collector`.
pub(super) fn count_target_sources<'a>(
    rules: &dyn PolicyLookup,
    collector: Option<&Collector>,
    topics: impl Iterator<Item = (&'a str, &'a [BatchReport])>,
) {
    for (topic, reports) in topics {
        let source = rules.target_source(topic);
        metrics::batches_by_target_source(source, reports.len());
        if let (TargetSource::Auto, Some(collector)) = (source, collector) {
            let bytes: usize = reports.iter().map(|r| r.bytes_in).sum();
            collector.add_traffic(topic, bytes as u64, reports.len() as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kpress_batch::builder::{BatchBuilder, Record};
    use kpress_codec::Codec;

    #[test]
    fn records_are_counted_from_batch_headers() {
        let batch = BatchBuilder::codec(Codec::Lz4)
            .build(&[Record::value("a"), Record::value("b"), Record::value("c")])
            .unwrap();
        assert_eq!(records_declared(&batch), 3);
        assert_eq!(records_declared(&[batch.clone(), batch].concat()), 6);
        assert_eq!(records_declared(b"garbage"), 0);
    }
}
