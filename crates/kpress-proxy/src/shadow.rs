//! Shadow trials (`[shadow]`): what each candidate codec would make of live traffic.
//!
//! The Produce rewrite samples each topic's batches (deterministically: with `sample =
//! 0.01`, every hundredth batch of a topic) and copies a sampled batch's bytes, as the
//! producer sent them, into a queue bounded in bytes; what goes to the broker is
//! neither delayed past that copy nor changed. Worker threads at the lowest priority
//! (nice 19, `SCHED_IDLE`) take the batches, check their CRC, decompress them within
//! `[limits]`, and compress the records with every candidate, counting whole-batch
//! sizes (61-byte header + compressed records) and the CPU each candidate took.
//!
//! An auto topic the autopilot has not decided yet is sampled at
//! [`AUTO_EXPLORE_SAMPLE`] (or `sample` if higher), so its first choice comes
//! sooner; once decided, at `sample`, enough to follow it.
//!
//! The CPU budget is a bucket of CPU time filled at `max_cpu_fraction` × the host's
//! available parallelism per second, holding at most one [`SHADOW_CPU_WINDOW`] of it:
//! a batch sampled, or taken from the queue, while the bucket is empty is skipped and
//! counted. So over any window the trials use at most their share plus one batch's
//! trial.
//!
//! The trials ride in the [`PolicySnapshot`](crate::PolicySnapshot): a Produce
//! request is rewritten and sampled under one snapshot. A [`ShadowTrials`] handle is
//! cheap to clone; a reload whose `[shadow]` and limits are unchanged keeps the
//! running trials ([`ShadowTrials::follow`]), and replaced trials' workers end once
//! their last handle is gone and their queue is empty.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kpress_batch::{batches, RecordBatch, HEADER_LEN};
use kpress_codec::{Codec, Compressor, Decompressor};
use kpress_config::{Limits, ShadowSettings, AUTO_EXPLORE_SAMPLE, SHADOW_CPU_WINDOW};

use crate::autopilot::Collector;
use crate::metrics::{self, ShadowResult};
use kpress_measure::thread_cpu_time;

/// [`metrics::SHADOW_SKIPPED`] reasons.
pub(crate) const SKIPPED_QUEUE_FULL: &str = "queue_full";
pub(crate) const SKIPPED_CPU_BUDGET: &str = "cpu_budget";
pub(crate) const SKIPPED_CORRUPT: &str = "corrupt";
pub(crate) const SKIPPED_NOT_DECODABLE: &str = "not_decodable";
pub(crate) const SKIPPED_COMPRESS_FAILED: &str = "compress_failed";

/// Per-topic batch counters for sampling, by a hash of the topic name: a fixed table,
/// so topics clients invent cost no memory; topics sharing a slot share a count,
/// which keeps the sampled share the same.
const SAMPLE_SLOTS: usize = 256;

/// Running shadow trials: a handle to the sampler, the queue and the workers. Clones
/// share them; the workers end once the last handle is dropped and the queue is empty.
#[derive(Debug, Clone)]
pub struct ShadowTrials(Arc<Trials>);

/// The trials' worker threads could not be started.
#[derive(Debug, thiserror::Error)]
#[error("cannot start a shadow trial thread: {0}")]
pub struct ShadowStartError(#[source] pub std::io::Error);

impl ShadowTrials {
    /// Starts `settings.threads` workers trying `settings.candidates`, decompressing
    /// within `limits`.
    pub fn start(
        settings: &ShadowSettings,
        limits: &Limits,
    ) -> Result<ShadowTrials, ShadowStartError> {
        ShadowTrials::start_feeding(settings, limits, None)
    }

    /// [`start`](Self::start), the workers also handing each trial to `collector`
    /// (the autopilot's).
    pub fn start_feeding(
        settings: &ShadowSettings,
        limits: &Limits,
        collector: Option<&Arc<Collector>>,
    ) -> Result<ShadowTrials, ShadowStartError> {
        Trials::start(
            settings.clone(),
            TrialLimits::of(limits),
            collector.cloned(),
        )
        .map(|trials| ShadowTrials(Arc::new(trials)))
        .map_err(ShadowStartError)
    }

    /// Whether these trials run exactly `settings` within `limits` (so a reload with
    /// them can keep these).
    pub fn same_settings(&self, settings: &ShadowSettings, limits: &Limits) -> bool {
        self.0.settings == *settings && self.0.limits == TrialLimits::of(limits)
    }

    /// The autopilot's collector the trials feed, if any.
    pub fn collector(&self) -> Option<&Arc<Collector>> {
        self.0.collector.as_ref()
    }

    /// The trials for a policy with `settings` (`None`: no `[shadow]`), given the ones
    /// `running`: those kept when their settings are the same, else new ones started
    /// (`None` if no worker starts). Logs what changed.
    pub fn follow(
        running: Option<&ShadowTrials>,
        settings: Option<&ShadowSettings>,
        limits: &Limits,
    ) -> Option<ShadowTrials> {
        ShadowTrials::follow_feeding(running, settings, limits, None)
    }

    /// [`follow`](Self::follow), with trials feeding `collector` (running trials
    /// feeding another, or none, are replaced).
    pub fn follow_feeding(
        running: Option<&ShadowTrials>,
        settings: Option<&ShadowSettings>,
        limits: &Limits,
        collector: Option<&Arc<Collector>>,
    ) -> Option<ShadowTrials> {
        let Some(settings) = settings else {
            if running.is_some() {
                tracing::info!("shadow trials stopped");
            }
            return None;
        };
        let same_collector = |t: &ShadowTrials| match (t.collector(), collector) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        if let Some(running) =
            running.filter(|t| t.same_settings(settings, limits) && same_collector(t))
        {
            return Some(running.clone());
        }
        match ShadowTrials::start_feeding(settings, limits, collector) {
            Ok(trials) => {
                tracing::info!(
                    candidates = %trials.0.labels.join(", "),
                    sample = settings.sample,
                    max_cpu_fraction = settings.max_cpu_fraction,
                    threads = settings.threads,
                    "shadow trials running"
                );
                Some(trials)
            }
            Err(err) => {
                tracing::error!(error = %err, "shadow trials not started");
                None
            }
        }
    }

    /// Whether `a` and `b` are handles to the same running trials.
    pub fn ptr_eq(a: &ShadowTrials, b: &ShadowTrials) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }

    /// See [`Trials::sample`].
    pub(crate) fn sample(&self, topic: &str, records: &[u8], out: &mut Vec<Sample>) {
        self.0.sample(topic, records, out);
    }

    /// See [`Trials::send`].
    pub(crate) fn send(&self, topic: Arc<str>, sample: Sample) {
        self.0.send(topic, sample);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TrialLimits {
    max_decompressed_bytes: usize,
    max_decompression_ratio: usize,
}

impl TrialLimits {
    fn of(limits: &Limits) -> TrialLimits {
        TrialLimits {
            max_decompressed_bytes: limits.max_decompressed_bytes,
            max_decompression_ratio: limits.max_decompression_ratio,
        }
    }

    /// What `compressed` bytes may decompress to.
    fn bound(&self, compressed: usize) -> usize {
        self.max_decompressed_bytes
            .min(compressed.saturating_mul(self.max_decompression_ratio))
    }
}

/// Running trials: the sampler, the queue and the budget the workers share.
pub(crate) struct Trials {
    settings: ShadowSettings,
    limits: TrialLimits,
    /// The candidates' metric labels (canonical specs), in settings order.
    labels: Vec<Arc<str>>,
    sender: mpsc::Sender<Job>,
    queued: Arc<QueuedBytes>,
    budget: Arc<CpuBudget>,
    counts: [AtomicU64; SAMPLE_SLOTS],
    /// The autopilot's, fed every trial of a topic it tracks.
    collector: Option<Arc<Collector>>,
}

impl fmt::Debug for Trials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Trials")
            .field("candidates", &self.labels)
            .field("sample", &self.settings.sample)
            .finish_non_exhaustive()
    }
}

/// A sampled batch, copied, holding its place in the queue's byte bound.
#[derive(Debug)]
pub(crate) struct Sample {
    batch: Vec<u8>,
    _held: Held,
    /// The topic, when the trials feed a collector.
    topic: Option<Arc<str>>,
}

impl Sample {
    /// The batch as the producer sent it.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.batch
    }
}

struct Job {
    topic: Arc<str>,
    sample: Sample,
}

impl Trials {
    fn start(
        settings: ShadowSettings,
        limits: TrialLimits,
        collector: Option<Arc<Collector>>,
    ) -> std::io::Result<Trials> {
        let (sender, receiver) = mpsc::channel::<Job>();
        let receiver = Arc::new(Mutex::new(receiver));
        let budget = Arc::new(CpuBudget::new(settings.max_cpu_fraction));
        let labels: Vec<Arc<str>> = settings
            .candidates
            .iter()
            .map(|c| Arc::from(c.to_string()))
            .collect();
        for index in 0..settings.threads {
            let worker = Worker {
                receiver: Arc::clone(&receiver),
                budget: Arc::clone(&budget),
                limits,
                compressors: settings
                    .candidates
                    .iter()
                    .map(|c| Compressor::new(c.codec(), c.options()))
                    .collect(),
                labels: labels.clone(),
                collector: collector.clone(),
            };
            std::thread::Builder::new()
                .name(format!("kpress-shadow-{index}"))
                .spawn(move || worker.run())?;
        }
        Ok(Trials {
            queued: Arc::new(QueuedBytes {
                held: AtomicUsize::new(0),
                max: settings.max_queue_bytes,
            }),
            settings,
            limits,
            labels,
            sender,
            budget,
            counts: [const { AtomicU64::new(0) }; SAMPLE_SLOTS],
            collector,
        })
    }

    /// Copies the batches of `records` (one partition's, as the producer sent them)
    /// that the sample picks into `out`. A pick with no CPU budget or queue room left
    /// is counted and not copied.
    pub(crate) fn sample(&self, topic: &str, records: &[u8], out: &mut Vec<Sample>) {
        let count = &self.counts[slot(topic)];
        let rate = self.rate(topic);
        let mut name: Option<Arc<str>> = None;
        // An unparseable tail is the rewrite's business; trials take what parses.
        for batch in batches(records).map_while(Result::ok) {
            let n = count.fetch_add(1, Ordering::Relaxed);
            if !picked(n, rate) {
                continue;
            }
            if !self.budget.has_room() {
                metrics::shadow_skipped(SKIPPED_CPU_BUDGET);
                continue;
            }
            let bytes = batch.bytes();
            let Some(held) = self.queued.hold(bytes.len()) else {
                metrics::shadow_skipped(SKIPPED_QUEUE_FULL);
                continue;
            };
            let topic = self
                .collector
                .as_ref()
                .map(|_| Arc::clone(name.get_or_insert_with(|| Arc::from(topic))));
            out.push(Sample {
                batch: bytes.to_vec(),
                _held: held,
                topic,
            });
        }
    }

    /// The share of `topic`'s batches sampled: the exploration rate while it is an
    /// undecided auto topic, else `[shadow] sample`.
    fn rate(&self, topic: &str) -> f64 {
        match &self.collector {
            Some(collector) if collector.exploring(topic) => {
                self.settings.sample.max(AUTO_EXPLORE_SAMPLE)
            }
            _ => self.settings.sample,
        }
    }

    /// Queues a sample of the topic labelled `topic` for the workers.
    pub(crate) fn send(&self, topic: Arc<str>, sample: Sample) {
        // Fails only when every worker has gone (they never end while `self` lives).
        let _ = self.sender.send(Job { topic, sample });
    }
}

/// Whether the `n`th batch (from 0) is sampled at rate `sample`: where the running
/// count of `n × sample` passes a whole number, so picks are evenly spaced.
fn picked(n: u64, sample: f64) -> bool {
    ((n + 1) as f64 * sample).floor() > (n as f64 * sample).floor()
}

/// FNV-1a of the topic name, to a sampling slot.
fn slot(topic: &str) -> usize {
    let hash = topic.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    (hash % SAMPLE_SLOTS as u64) as usize
}

/// Bytes of samples copied and not yet tried, against `max_queue_bytes`.
#[derive(Debug)]
struct QueuedBytes {
    held: AtomicUsize,
    max: usize,
}

impl QueuedBytes {
    fn hold(self: &Arc<Self>, bytes: usize) -> Option<Held> {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(bytes).filter(|&total| total <= self.max)
            })
            .ok()?;
        Some(Held {
            queue: Arc::clone(self),
            bytes,
        })
    }
}

/// A sample's share of the queue bound, given back when the sample is dropped.
#[derive(Debug)]
struct Held {
    queue: Arc<QueuedBytes>,
    bytes: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.queue.held.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// CPU seconds the trials may still use: filled at `rate` per second, at most
/// `capacity`, drawn by each trial's thread CPU time (it may go below zero by the
/// trial that emptied it).
#[derive(Debug)]
struct CpuBudget {
    rate: f64,
    capacity: f64,
    state: Mutex<(f64, Instant)>,
}

impl CpuBudget {
    fn new(max_cpu_fraction: f64) -> CpuBudget {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let rate = max_cpu_fraction * cpus as f64;
        let capacity = rate * SHADOW_CPU_WINDOW.as_secs_f64();
        CpuBudget {
            rate,
            capacity,
            state: Mutex::new((capacity, Instant::now())),
        }
    }

    /// Adds `-spent` after filling up to now; returns what is left.
    fn draw(&self, spent: Duration) -> f64 {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let filled = state.0 + now.saturating_duration_since(state.1).as_secs_f64() * self.rate;
        state.0 = filled.min(self.capacity) - spent.as_secs_f64();
        state.1 = now;
        state.0
    }

    fn has_room(&self) -> bool {
        self.draw(Duration::ZERO) > 0.0
    }
}

/// One trial thread: its own codec state, reused batch after batch.
struct Worker {
    receiver: Arc<Mutex<mpsc::Receiver<Job>>>,
    budget: Arc<CpuBudget>,
    limits: TrialLimits,
    compressors: Vec<Compressor>,
    labels: Vec<Arc<str>>,
    collector: Option<Arc<Collector>>,
}

impl Worker {
    fn run(mut self) {
        lower_priority();
        let mut decompressor = Decompressor::new();
        let mut raw = Vec::new();
        let mut out = Vec::new();
        let mut results = Vec::with_capacity(self.compressors.len());
        loop {
            let job = {
                let receiver = self.receiver.lock().unwrap_or_else(PoisonError::into_inner);
                receiver.recv()
            };
            // The trials were replaced or stopped and the queue is empty.
            let Ok(job) = job else { return };
            if !self.budget.has_room() {
                metrics::shadow_skipped(SKIPPED_CPU_BUDGET);
                continue;
            }
            let start = thread_cpu_time();
            let outcome = self.trial(
                &job.sample.batch,
                &mut decompressor,
                &mut raw,
                &mut out,
                &mut results,
            );
            self.budget.draw(thread_cpu_time().saturating_sub(start));
            match outcome {
                Ok(()) => {
                    metrics::shadow_trial(
                        &job.topic,
                        job.sample.batch.len(),
                        raw.len(),
                        &self.labels,
                        &results,
                    );
                    self.feed(&job.sample, raw.len(), &results);
                }
                Err(reason) => metrics::shadow_skipped(reason),
            }
            // Memory of one unusually large batch is not kept for the next.
            for buffer in [&mut raw, &mut out] {
                buffer.clear();
                buffer.shrink_to(1 << 20);
            }
        }
    }

    /// Hands a trial of `sample` (`raw` bytes of records) to the collector.
    fn feed(&self, sample: &Sample, raw: usize, results: &[ShadowResult]) {
        let (Some(collector), Some(topic)) = (&self.collector, &sample.topic) else {
            return;
        };
        let trials: Vec<(&str, u64, u64)> = self
            .labels
            .iter()
            .zip(results)
            .map(|(label, r)| {
                let cpu = u64::try_from(r.cpu.as_nanos()).unwrap_or(u64::MAX);
                (&**label, r.bytes_out as u64, cpu)
            })
            .collect();
        collector.add_batch(topic, sample.batch.len() as u64, raw as u64, &trials);
    }

    /// Decompresses `batch`'s records into `raw` and compresses them with every
    /// candidate, into `results`; `Err` is the skip reason.
    fn trial(
        &mut self,
        batch: &[u8],
        decompressor: &mut Decompressor,
        raw: &mut Vec<u8>,
        out: &mut Vec<u8>,
        results: &mut Vec<ShadowResult>,
    ) -> Result<(), &'static str> {
        results.clear();
        raw.clear();
        let batch = RecordBatch::parse(batch).map_err(|_| SKIPPED_CORRUPT)?;
        if !batch.crc_is_valid() {
            return Err(SKIPPED_CORRUPT);
        }
        let codec = batch.codec().ok_or(SKIPPED_NOT_DECODABLE)?;
        let records = batch.records();
        match codec {
            Codec::None => raw.extend_from_slice(records),
            codec => {
                decompressor
                    .decompress(codec, records, self.limits.bound(records.len()), raw)
                    .map_err(|_| SKIPPED_NOT_DECODABLE)?;
            }
        }
        for compressor in &mut self.compressors {
            out.clear();
            let start = thread_cpu_time();
            compressor
                .compress(raw, out)
                .map_err(|_| SKIPPED_COMPRESS_FAILED)?;
            results.push(ShadowResult {
                bytes_out: HEADER_LEN + out.len(),
                cpu: thread_cpu_time().saturating_sub(start),
            });
        }
        Ok(())
    }
}

/// Puts the calling thread at the lowest priority: nice 19, then `SCHED_IDLE` (it runs
/// only when a CPU would otherwise idle). Either may be refused; the trials run anyway.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid has no arguments and cannot fail.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) };
        // SAFETY: setpriority reads its plain arguments only; Linux applies
        // PRIO_PROCESS with a thread id to that thread.
        let nice = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19) };
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid sched_param; pid 0 is the calling thread.
        let idle = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
        if nice != 0 || idle != 0 {
            tracing::debug!(
                error = %std::io::Error::last_os_error(),
                "shadow trial thread kept a higher priority"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kpress_batch::builder::{BatchBuilder, Record};

    #[test]
    fn picks_are_evenly_spaced_at_the_sample_rate() {
        let picks = |sample: f64| (0..1000).filter(|&n| picked(n, sample)).collect::<Vec<_>>();
        assert_eq!(picks(1.0).len(), 1000);
        let hundredth = picks(0.01);
        assert_eq!(hundredth.len(), 10);
        assert_eq!(hundredth[0], 99);
        assert_eq!(hundredth[1], 199);
        assert_eq!(picks(0.5).len(), 500);
        assert_eq!(picks(0.001).len(), 1);
    }

    #[test]
    fn the_queue_holds_at_most_its_bytes_and_gives_them_back() {
        let queue = Arc::new(QueuedBytes {
            held: AtomicUsize::new(0),
            max: 100,
        });
        let a = queue.hold(60).unwrap();
        assert!(queue.hold(41).is_none());
        let b = queue.hold(40).unwrap();
        drop(a);
        assert_eq!(queue.held.load(Ordering::Acquire), 40);
        drop(b);
        assert_eq!(queue.held.load(Ordering::Acquire), 0);
    }

    #[test]
    fn the_budget_empties_by_cpu_spent_and_refills_at_its_rate() {
        let budget = CpuBudget {
            rate: 1.0,
            capacity: 0.01,
            state: Mutex::new((0.01, Instant::now())),
        };
        assert!(budget.has_room());
        budget.draw(Duration::from_millis(50));
        assert!(!budget.has_room());
        std::thread::sleep(Duration::from_millis(60));
        assert!(budget.has_room());
        // Never more than the capacity, however long it waited.
        assert!(budget.draw(Duration::ZERO) <= 0.01);
    }

    fn settings(candidates: &[&str], sample: f64) -> ShadowSettings {
        ShadowSettings {
            sample,
            candidates: candidates.iter().map(|c| c.parse().unwrap()).collect(),
            max_cpu_fraction: 1.0,
            threads: 1,
            max_queue_bytes: 1 << 20,
        }
    }

    fn trials(candidates: &[&str], sample: f64) -> Trials {
        Trials::start(
            settings(candidates, sample),
            TrialLimits::of(&Limits::default()),
            None,
        )
        .unwrap()
    }

    #[test]
    fn unchanged_settings_keep_the_running_trials() {
        let settings = settings(&["zstd:3"], 0.5);
        let limits = Limits::default();
        let running = ShadowTrials::follow(None, Some(&settings), &limits).expect("started");
        let kept = ShadowTrials::follow(Some(&running), Some(&settings), &limits).unwrap();
        assert!(ShadowTrials::ptr_eq(&kept, &running));
        // Another sample rate, or other decompression limits: new trials.
        let resampled = ShadowSettings {
            sample: 0.25,
            ..settings.clone()
        };
        let new = ShadowTrials::follow(Some(&running), Some(&resampled), &limits).unwrap();
        assert!(!ShadowTrials::ptr_eq(&new, &running));
        assert!(new.same_settings(&resampled, &limits));
        let tighter = Limits {
            max_decompressed_bytes: limits.max_decompressed_bytes / 2,
            ..limits
        };
        assert!(!running.same_settings(&settings, &tighter));
        // Limits the trials do not use leave them as they are.
        let more_connections = Limits {
            max_connections: limits.max_connections + 1,
            ..limits
        };
        assert!(running.same_settings(&settings, &more_connections));
        assert!(ShadowTrials::follow(Some(&running), None, &limits).is_none());
    }

    #[test]
    fn sampling_copies_whole_batches_per_topic() {
        let trials = trials(&["zstd:3"], 0.5);
        let batch = BatchBuilder::codec(Codec::Gzip)
            .build(&[Record::value("a record"), Record::value("another")])
            .unwrap();
        let two = [batch.clone(), batch.clone()].concat();
        let mut out = Vec::new();
        // Each topic counts its own: the second batch of each is picked.
        trials.sample("a", &batch, &mut out);
        trials.sample("b", &batch, &mut out);
        assert!(out.is_empty());
        trials.sample("a", &batch, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].batch, batch);
        trials.sample("b", &two, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(trials.queued.held.load(Ordering::Acquire), 2 * batch.len());
        out.clear();
        assert_eq!(trials.queued.held.load(Ordering::Acquire), 0);
    }

    #[test]
    fn undecided_auto_topics_are_sampled_at_the_exploration_rate() {
        let collector = Arc::new(Collector::new(8));
        let trials = Trials::start(
            settings(&["zstd:3"], 0.01),
            TrialLimits::of(&Limits::default()),
            Some(Arc::clone(&collector)),
        )
        .unwrap();
        // Auto topics are the ones whose traffic the collector counts.
        collector.add_traffic("undecided", 100, 1);
        collector.add_traffic("decided", 100, 1);
        collector.set_decided([Box::from("decided")]);
        let batch = BatchBuilder::codec(Codec::Lz4)
            .build(&[Record::value("a record")])
            .unwrap();
        let picks = |topic: &str| {
            let mut out = Vec::new();
            for _ in 0..1000 {
                trials.sample(topic, &batch, &mut out);
            }
            out.len()
        };
        let explore = (1000.0 * AUTO_EXPLORE_SAMPLE) as usize;
        assert_eq!(picks("undecided"), explore);
        assert_eq!(picks("decided"), 10);
        assert_eq!(picks("not-auto"), 10);
        // Once decided, the topic drops to the base rate.
        collector.set_decided([Box::from("decided"), Box::from("undecided")]);
        assert_eq!(picks("undecided"), 10);
    }

    #[test]
    fn a_trial_sizes_each_candidate_as_a_whole_batch() {
        let trials = trials(&["zstd:3", "none", "gzip:1"], 1.0);
        let records: Vec<Record> = (0..200)
            .map(|i| Record::value(format!("GET /index.html?page={i} HTTP/1.1 200")))
            .collect();
        let plain = BatchBuilder::codec(Codec::None).build(&records).unwrap();
        let lz4 = BatchBuilder::codec(Codec::Lz4).build(&records).unwrap();
        let mut worker = Worker {
            receiver: Arc::new(Mutex::new(mpsc::channel().1)),
            budget: Arc::clone(&trials.budget),
            limits: trials.limits,
            compressors: trials
                .settings
                .candidates
                .iter()
                .map(|c| Compressor::new(c.codec(), c.options()))
                .collect(),
            labels: trials.labels.clone(),
            collector: None,
        };
        let (mut d, mut raw, mut out, mut results) =
            (Decompressor::new(), Vec::new(), Vec::new(), Vec::new());
        worker
            .trial(&lz4, &mut d, &mut raw, &mut out, &mut results)
            .unwrap();
        assert_eq!(raw.len(), plain.len() - HEADER_LEN);
        assert_eq!(results.len(), 3);
        // `none` writes the batch as the uncompressed one.
        assert_eq!(results[1].bytes_out, plain.len());
        let zstd = BatchBuilder::codec(Codec::Zstd).build(&records).unwrap();
        assert_eq!(results[0].bytes_out, zstd.len());
        // A flipped byte fails the CRC: skipped, never tried.
        let mut corrupt = lz4.clone();
        let last = corrupt.len() - 1;
        corrupt[last] ^= 1;
        assert_eq!(
            worker.trial(&corrupt, &mut d, &mut raw, &mut out, &mut results),
            Err(SKIPPED_CORRUPT)
        );
        assert_eq!(
            worker.trial(b"short", &mut d, &mut raw, &mut out, &mut results),
            Err(SKIPPED_CORRUPT)
        );
    }
}
