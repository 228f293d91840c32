//! What this process saw of auto topics in the current decision window: every batch
//! byte produced to each (as sent), and the shadow trials of its sampled batches.
//!
//! The Produce path counts traffic once per topic of a request, only for topics whose
//! policy is an auto rule's choice (`target_source = auto`), so topics of other rules
//! cost nothing here. The trial workers add each tried batch of a topic the window
//! tracks. The window task takes everything at the end of each window
//! ([`Collector::take`]), which also frees the slots of idle topics: at most `cap`
//! topics are tracked at once, batches of others are counted in
//! [`metrics::AUTOPILOT_UNTRACKED_BATCHES`](super::metrics::AUTOPILOT_UNTRACKED_BATCHES) and left out.
//!
//! It also knows which topics have a choice, so the trials sample an undecided tracked
//! topic at the exploration rate ([`Collector::exploring`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use arc_swap::ArcSwap;
use kpress_autopilot::TopicFigures;

use super::metrics;

/// One topic's window.
#[derive(Debug, Default)]
struct Slot {
    traffic: AtomicU64,
    trials: Mutex<TopicFigures>,
}

/// The current window's traffic and trials of auto topics, for at most `cap` topics.
#[derive(Debug)]
pub struct Collector {
    cap: usize,
    topics: RwLock<HashMap<Arc<str>, Arc<Slot>>>,
    /// Topics with a choice (a candidate or as sent), as the autopilot last applied.
    decided: ArcSwap<HashSet<Box<str>>>,
}

/// A topic's window as taken: bytes produced (as sent) and trial figures (no traffic,
/// no span: the window task adds those).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TopicWindow {
    pub traffic_bytes: u64,
    pub trials: TopicFigures,
}

impl Collector {
    /// A collector tracking at most `cap` topics per window.
    pub fn new(cap: usize) -> Collector {
        Collector {
            cap,
            topics: RwLock::default(),
            decided: ArcSwap::default(),
        }
    }

    /// Sets the topics that have a choice.
    pub fn set_decided(&self, topics: impl IntoIterator<Item = Box<str>>) {
        let decided: HashSet<Box<str>> = topics.into_iter().collect();
        if **self.decided.load() != decided {
            self.decided.store(Arc::new(decided));
        }
    }

    /// Whether `topic` is an auto topic tracked this window that has no choice yet:
    /// its batches are sampled at the exploration rate. A decided topic costs one
    /// lookup, without the read lock.
    pub fn exploring(&self, topic: &str) -> bool {
        !self.decided.load().contains(topic) && self.read().contains_key(topic)
    }

    /// Counts `bytes` of `batches` produced to `topic` (an auto topic), as sent. A
    /// topic already tracked costs a read lock and one atomic add.
    pub fn add_traffic(&self, topic: &str, bytes: u64, batches: u64) {
        if let Some(slot) = self.read().get(topic) {
            slot.traffic.fetch_add(bytes, Ordering::Relaxed);
            return;
        }
        let mut topics = self.topics.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = topics.get(topic) {
            slot.traffic.fetch_add(bytes, Ordering::Relaxed);
            return;
        }
        if topics.len() >= self.cap {
            drop(topics);
            metrics::untracked_batches(batches);
            return;
        }
        let slot = Slot::default();
        slot.traffic.store(bytes, Ordering::Relaxed);
        topics.insert(Arc::from(topic), Arc::new(slot));
    }

    /// Adds one tried batch of `topic`: `bytes_in` as sent, `raw` bytes of records,
    /// and each candidate's `(label, bytes_out, cpu_nanos)`. Ignored unless the topic's
    /// traffic is tracked this window (it is an auto topic within the cap).
    pub fn add_batch(&self, topic: &str, bytes_in: u64, raw: u64, trials: &[(&str, u64, u64)]) {
        let Some(slot) = self.read().get(topic).cloned() else {
            return;
        };
        slot.trials
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .add_batch(bytes_in, raw, trials);
    }

    /// Ends the window: every tracked topic's traffic and trials. A topic that had
    /// neither stops being tracked (its slot goes to another); the others keep their
    /// slots, so trials of batches sampled before the window ended still count.
    pub fn take(&self) -> BTreeMap<String, TopicWindow> {
        let mut topics = self.topics.write().unwrap_or_else(PoisonError::into_inner);
        let mut out = BTreeMap::new();
        topics.retain(|topic, slot| {
            let window = TopicWindow {
                traffic_bytes: slot.traffic.swap(0, Ordering::Relaxed),
                trials: std::mem::take(
                    &mut *slot.trials.lock().unwrap_or_else(PoisonError::into_inner),
                ),
            };
            let active = window.traffic_bytes > 0 || !window.trials.candidates.is_empty();
            if active {
                out.insert(topic.to_string(), window);
            }
            active
        });
        out
    }

    /// Topics tracked in the current window.
    pub fn tracked(&self) -> usize {
        self.read().len()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Arc<str>, Arc<Slot>>> {
        self.topics.read().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trials_count_only_for_topics_whose_traffic_is_tracked() {
        let collector = Collector::new(8);
        // No traffic counted: not an auto topic (the Produce path counts only those).
        collector.add_batch("other", 100, 400, &[("lz4", 50, 10)]);
        collector.add_traffic("logs", 1000, 2);
        collector.add_traffic("logs", 500, 1);
        collector.add_batch("logs", 100, 400, &[("lz4", 50, 10), ("zstd:3", 40, 20)]);
        let taken = collector.take();
        assert_eq!(taken.len(), 1);
        let logs = &taken["logs"];
        assert_eq!(logs.traffic_bytes, 1500);
        assert_eq!(logs.trials.candidates["lz4"].samples, 1);
        assert_eq!(logs.trials.candidates["zstd:3"].bytes_out, 40);
        assert_eq!(logs.trials.pairs.len(), 1);
        // The next window starts empty; an idle topic gives its slot up.
        assert_eq!(collector.tracked(), 1);
        assert!(collector.take().is_empty());
        assert_eq!(collector.tracked(), 0);
    }

    #[test]
    fn a_tracked_topic_explores_until_it_has_a_choice() {
        let collector = Collector::new(8);
        // Not counted as an auto topic: never explored.
        assert!(!collector.exploring("logs"));
        collector.add_traffic("logs", 100, 1);
        collector.add_traffic("metrics", 100, 1);
        assert!(collector.exploring("logs"));
        collector.set_decided([Box::from("logs")]);
        assert!(!collector.exploring("logs"));
        assert!(collector.exploring("metrics"));
        // A choice dropped (a reload, a rule's candidates changed): exploring again.
        collector.set_decided([]);
        assert!(collector.exploring("logs"));
    }

    #[test]
    fn at_most_cap_topics_are_tracked_at_once() {
        let collector = Collector::new(2);
        for topic in ["a", "b", "c", "d"] {
            collector.add_traffic(topic, 10, 1);
        }
        collector.add_traffic("a", 10, 1);
        collector.add_batch("c", 100, 400, &[("lz4", 50, 10)]);
        assert_eq!(collector.tracked(), 2);
        let taken = collector.take();
        assert_eq!(taken.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(taken["a"].traffic_bytes, 20);
        // Once a topic is idle for a window, its slot is free again.
        collector.add_traffic("a", 10, 1);
        collector.take();
        collector.add_traffic("c", 10, 1);
        assert_eq!(collector.take().keys().collect::<Vec<_>>(), ["c"]);
    }
}
