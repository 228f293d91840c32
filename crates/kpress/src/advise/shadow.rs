//! Per-topic advice from kpress's metrics: the shadow trials' figures per candidate,
//! the topic's produce counters and its batch-size histogram. Sans-IO: samples in,
//! projections out.

use std::collections::BTreeMap;

use kpress_codec::Candidate;
use kpress_proxy::metrics::{
    BATCHES_GROWN, BATCHES_REWRITTEN, BATCH_BYTES, OTHER_TOPICS, PRODUCE_BYTES_IN,
    PRODUCE_BYTES_OUT, SHADOW_BATCHES, SHADOW_BYTES_IN, SHADOW_BYTES_OUT, SHADOW_CPU_SECONDS,
    SHADOW_RAW_BYTES, SHADOW_SKIPPED,
};

use anyhow::bail;

use super::prometheus;
use super::rank::{self, Floors, Goal, Measured, Ranked};

/// Above what a kpress page holds: `[limits] max_topic_labels` allows at most 100000
/// topics (and `_other`), `[shadow] candidates` at most 16.
const MAX_TOPICS: usize = 100_001;
const MAX_CANDIDATES: usize = 64;

/// One candidate's shadow counters on one topic.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Trial {
    pub(crate) bytes_in: f64,
    pub(crate) bytes_out: f64,
    pub(crate) cpu_seconds: f64,
}

/// One topic's counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Topic {
    pub(crate) produce_in: f64,
    pub(crate) produce_out: f64,
    pub(crate) batches: f64,
    pub(crate) batch_bytes_sum: f64,
    pub(crate) shadow_raw: f64,
    pub(crate) shadow_batches: f64,
    /// Batches kpress rewrote, and of them those that came out larger than sent.
    pub(crate) rewritten: f64,
    pub(crate) grown: f64,
    pub(crate) trials: BTreeMap<String, Trial>,
}

/// The counters advice reads, by topic.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Figures {
    pub(crate) topics: BTreeMap<String, Topic>,
    /// `kpress_shadow_skipped_total` by reason.
    pub(crate) skipped: BTreeMap<String, f64>,
}

impl Figures {
    /// The figures of a metrics page. Fails on a line that is not a sample, and on more
    /// topics or candidates than any kpress page holds.
    pub(crate) fn from_page(page: &str) -> anyhow::Result<Figures> {
        let mut figures = Figures::default();
        for sample in prometheus::samples(page) {
            let sample = sample?;
            if !sample.value.is_finite() || sample.value < 0.0 {
                continue;
            }
            if sample.name == SHADOW_SKIPPED {
                *figures
                    .skipped
                    .entry(sample.label("reason").unwrap_or("").to_owned())
                    .or_default() += sample.value;
                continue;
            }
            let Some(topic_name) = sample.label("topic") else {
                continue;
            };
            let value = sample.value;
            let name = sample.name.as_str();
            let histogram = name.strip_prefix(BATCH_BYTES);
            let field = match name {
                PRODUCE_BYTES_IN | PRODUCE_BYTES_OUT | SHADOW_RAW_BYTES | SHADOW_BATCHES => name,
                SHADOW_BYTES_IN | SHADOW_BYTES_OUT | SHADOW_CPU_SECONDS => name,
                BATCHES_REWRITTEN | BATCHES_GROWN => name,
                _ if histogram == Some("_count") || histogram == Some("_sum") => name,
                _ => continue,
            };
            if !figures.topics.contains_key(topic_name) && figures.topics.len() >= MAX_TOPICS {
                bail!("more than {MAX_TOPICS} topics: not a kpress metrics page");
            }
            let topic = figures.topics.entry(topic_name.to_owned()).or_default();
            if field == PRODUCE_BYTES_IN {
                topic.produce_in += value;
            } else if field == PRODUCE_BYTES_OUT {
                topic.produce_out += value;
            } else if histogram == Some("_count") {
                topic.batches += value;
            } else if histogram == Some("_sum") {
                topic.batch_bytes_sum += value;
            } else if field == SHADOW_RAW_BYTES {
                topic.shadow_raw += value;
            } else if field == SHADOW_BATCHES {
                topic.shadow_batches += value;
            } else if field == BATCHES_REWRITTEN {
                topic.rewritten += value;
            } else if field == BATCHES_GROWN {
                topic.grown += value;
            } else {
                let Some(candidate) = sample.label("candidate") else {
                    continue;
                };
                if !topic.trials.contains_key(candidate) && topic.trials.len() >= MAX_CANDIDATES {
                    bail!("more than {MAX_CANDIDATES} candidates on topic {topic_name:?}: not a kpress metrics page");
                }
                let trial = topic.trials.entry(candidate.to_owned()).or_default();
                match name {
                    SHADOW_BYTES_IN => trial.bytes_in += value,
                    SHADOW_BYTES_OUT => trial.bytes_out += value,
                    _ => trial.cpu_seconds += value,
                }
            }
        }
        Ok(figures)
    }

    /// What the counters gained from `earlier` to `self` (a counter that went down
    /// was reset: its later value is what it gained).
    pub(crate) fn since(&self, earlier: &Figures) -> Figures {
        fn gain(later: f64, earlier: f64) -> f64 {
            if later >= earlier {
                later - earlier
            } else {
                later
            }
        }
        let mut out = self.clone();
        for (name, topic) in &mut out.topics {
            let Some(before) = earlier.topics.get(name) else {
                continue;
            };
            topic.produce_in = gain(topic.produce_in, before.produce_in);
            topic.produce_out = gain(topic.produce_out, before.produce_out);
            topic.batches = gain(topic.batches, before.batches);
            topic.batch_bytes_sum = gain(topic.batch_bytes_sum, before.batch_bytes_sum);
            topic.shadow_raw = gain(topic.shadow_raw, before.shadow_raw);
            topic.shadow_batches = gain(topic.shadow_batches, before.shadow_batches);
            topic.rewritten = gain(topic.rewritten, before.rewritten);
            topic.grown = gain(topic.grown, before.grown);
            for (candidate, trial) in &mut topic.trials {
                let Some(b) = before.trials.get(candidate) else {
                    continue;
                };
                trial.bytes_in = gain(trial.bytes_in, b.bytes_in);
                trial.bytes_out = gain(trial.bytes_out, b.bytes_out);
                trial.cpu_seconds = gain(trial.cpu_seconds, b.cpu_seconds);
            }
        }
        for (reason, count) in &mut out.skipped {
            *count = gain(*count, earlier.skipped.get(reason).copied().unwrap_or(0.0));
        }
        out
    }
}

/// What a topic would store with a candidate, projected from its shadow trials.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Projection {
    pub(crate) candidate: Candidate,
    /// What kpress forwarded (`kpress_produce_bytes_out_total`).
    pub(crate) bytes_now: f64,
    /// What it would have forwarded: bytes in × the candidate's shadow out/in.
    pub(crate) bytes_projected: f64,
}

impl Projection {
    pub(crate) fn saving(&self) -> f64 {
        self.bytes_now - self.bytes_projected
    }

    pub(crate) fn saving_fraction(&self) -> f64 {
        if self.bytes_now <= 0.0 {
            return 0.0;
        }
        self.saving() / self.bytes_now
    }
}

/// One topic's advice.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TopicAdvice {
    pub(crate) topic: String,
    pub(crate) figures: Topic,
    /// The candidates tried, best first for the goal.
    pub(crate) ranked: Vec<Ranked>,
    /// The first eligible candidate that stores less than what kpress forwards now.
    pub(crate) choice: Option<Projection>,
    /// Candidate labels that are not specs kpress reads.
    pub(crate) unreadable: Vec<String>,
}

impl TopicAdvice {
    /// The client batches' mean size, when the histogram has any.
    pub(crate) fn mean_batch_bytes(&self) -> Option<f64> {
        (self.figures.batches > 0.0).then(|| self.figures.batch_bytes_sum / self.figures.batches)
    }
}

/// Advice for every topic with shadow trials or batches that grew, in topic order.
pub(crate) fn advise(figures: &Figures, goal: Goal, floors: &Floors) -> Vec<TopicAdvice> {
    let mut out = Vec::new();
    for (name, topic) in &figures.topics {
        if topic.trials.is_empty() && topic.grown <= 0.0 {
            continue;
        }
        let mut unreadable = Vec::new();
        let mut measured = Vec::new();
        let mut trials = Vec::new();
        for (label, trial) in &topic.trials {
            let Ok(candidate) = label.parse::<Candidate>() else {
                unreadable.push(label.clone());
                continue;
            };
            if trial.bytes_in <= 0.0 {
                continue;
            }
            measured.push(Measured {
                candidate: candidate.clone(),
                batches: topic.shadow_batches as u64,
                raw_bytes: topic.shadow_raw as u64,
                stored_bytes: trial.bytes_out as u64,
                compress_seconds: trial.cpu_seconds,
                decompress_seconds: None,
            });
            trials.push((candidate, trial.clone()));
        }
        let ranked = rank::rank(measured, goal, floors);
        let choice = ranked
            .iter()
            .filter(|r| r.miss.is_none())
            .filter_map(|r| {
                let (_, trial) = trials.iter().find(|(c, _)| *c == r.measured.candidate)?;
                let projection = Projection {
                    candidate: r.measured.candidate.clone(),
                    bytes_now: topic.produce_out,
                    bytes_projected: topic.produce_in * trial.bytes_out / trial.bytes_in,
                };
                (projection.saving() > 0.0).then_some(projection)
            })
            .next();
        out.push(TopicAdvice {
            topic: name.clone(),
            figures: topic.clone(),
            ranked,
            choice,
            unreadable,
        });
    }
    out
}

/// Whether `topic` is the label of the topics without one of their own, which no
/// `match` names.
pub(crate) fn is_other_topics(topic: &str) -> bool {
    topic == OTHER_TOPICS
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A page as kpress renders it: two topics with shadow trials, one without.
    pub(crate) const PAGE: &str = r#"# TYPE kpress_produce_bytes_in_total counter
kpress_produce_bytes_in_total{topic="logs"} 1000000
kpress_produce_bytes_in_total{topic="metrics"} 500000
kpress_produce_bytes_in_total{topic="quiet"} 10
kpress_produce_bytes_out_total{topic="logs"} 1000000
kpress_produce_bytes_out_total{topic="metrics"} 500000
kpress_produce_bytes_out_total{topic="quiet"} 10
# TYPE kpress_batch_bytes histogram
kpress_batch_bytes_bucket{topic="logs",le="4096"} 200
kpress_batch_bytes_bucket{topic="logs",le="+Inf"} 250
kpress_batch_bytes_sum{topic="logs"} 1000000
kpress_batch_bytes_count{topic="logs"} 250
kpress_batch_bytes_sum{topic="metrics"} 500000
kpress_batch_bytes_count{topic="metrics"} 2
kpress_shadow_raw_bytes_total{topic="logs"} 400000
kpress_shadow_batches_total{topic="logs"} 100
kpress_shadow_bytes_in_total{topic="logs",candidate="zstd:3"} 100000
kpress_shadow_bytes_out_total{topic="logs",candidate="zstd:3"} 80000
kpress_shadow_cpu_seconds_total{topic="logs",candidate="zstd:3"} 0.002
kpress_shadow_bytes_in_total{topic="logs",candidate="zstd:19"} 100000
kpress_shadow_bytes_out_total{topic="logs",candidate="zstd:19"} 70000
kpress_shadow_cpu_seconds_total{topic="logs",candidate="zstd:19"} 0.1
kpress_shadow_bytes_in_total{topic="logs",candidate="lz4:9"} 100000
kpress_shadow_bytes_out_total{topic="logs",candidate="lz4:9"} 95000
kpress_shadow_cpu_seconds_total{topic="logs",candidate="lz4:9"} 0.0005
kpress_shadow_raw_bytes_total{topic="metrics"} 1000000
kpress_shadow_batches_total{topic="metrics"} 10
kpress_shadow_bytes_in_total{topic="metrics",candidate="gzip:6"} 50000
kpress_shadow_bytes_out_total{topic="metrics",candidate="gzip:6"} 60000
kpress_shadow_cpu_seconds_total{topic="metrics",candidate="gzip:6"} 0.02
kpress_shadow_bytes_in_total{topic="metrics",candidate="brotli:5"} 50000
kpress_shadow_skipped_total{reason="cpu_budget"} 3
"#;

    pub(crate) fn figures() -> Figures {
        Figures::from_page(PAGE).unwrap()
    }

    #[test]
    fn pages_with_more_series_than_kpress_renders_are_refused() {
        let many: String = (0..=MAX_CANDIDATES)
            .map(|i| {
                format!("kpress_shadow_bytes_in_total{{topic=\"t\",candidate=\"zstd:{i}\"}} 1\n")
            })
            .collect();
        let err = Figures::from_page(&many).unwrap_err().to_string();
        assert!(err.contains("candidates on topic \"t\""), "{err}");
    }

    #[test]
    fn reads_counters_by_topic_and_candidate() {
        let figures = figures();
        assert_eq!(figures.topics.len(), 3);
        let logs = &figures.topics["logs"];
        assert_eq!(logs.produce_in, 1e6);
        assert_eq!(logs.batches, 250.0);
        assert_eq!(logs.trials.len(), 3);
        assert_eq!(logs.trials["zstd:19"].bytes_out, 70000.0);
        assert_eq!(figures.skipped["cpu_budget"], 3.0);
    }

    #[test]
    fn size_picks_the_smallest_and_projects_the_saving() {
        let advice = advise(&figures(), Goal::Size, &Floors::default());
        assert_eq!(advice.len(), 2, "topics without trials have no advice");
        let logs = &advice[0];
        let choice = logs.choice.as_ref().unwrap();
        assert_eq!(choice.candidate.to_string(), "zstd:19");
        assert_eq!(choice.bytes_projected, 700000.0);
        assert_eq!(choice.saving(), 300000.0);
        assert!((choice.saving_fraction() - 0.3).abs() < 1e-9);
        assert_eq!(logs.mean_batch_bytes(), Some(4000.0));
        // A candidate that stores more than what goes now is no advice.
        let metrics = &advice[1];
        assert_eq!(metrics.choice, None);
        assert_eq!(metrics.unreadable, ["brotli:5"]);
    }

    #[test]
    fn floors_and_speed_choose_among_the_fast() {
        // zstd:19: 400 kB in 0.1 s = 4 MB/s; zstd:3 200 MB/s; lz4:9 800 MB/s.
        let floors = Floors {
            min_mbps: Some(100.0),
            max_cpu_ms_per_mb: None,
        };
        let advice = advise(&figures(), Goal::Size, &floors);
        assert_eq!(
            advice[0].choice.as_ref().unwrap().candidate.to_string(),
            "zstd:3"
        );
        let advice = advise(&figures(), Goal::Speed, &Floors::default());
        let choice = advice[0].choice.as_ref().unwrap();
        assert_eq!(choice.candidate.to_string(), "lz4:9");
        assert_eq!(choice.saving(), 50000.0);
    }

    #[test]
    fn an_interval_counts_what_the_counters_gained() {
        let earlier = figures();
        let mut later = figures();
        let logs = later.topics.get_mut("logs").unwrap();
        logs.produce_in += 500.0;
        logs.trials.get_mut("zstd:3").unwrap().bytes_out += 7.0;
        // A restarted proxy: its counter starts again from zero.
        later.topics.get_mut("metrics").unwrap().produce_in = 20.0;
        let gained = later.since(&earlier);
        assert_eq!(gained.topics["logs"].produce_in, 500.0);
        assert_eq!(gained.topics["logs"].produce_out, 0.0);
        assert_eq!(gained.topics["logs"].trials["zstd:3"].bytes_out, 7.0);
        assert_eq!(gained.topics["metrics"].produce_in, 20.0);
    }
}
