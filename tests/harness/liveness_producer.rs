//! A well-behaved producer in the background: one connection kept open (reopened if
//! it breaks), a bare Produce v7 (acks=all) of one valid batch at a steady pace, each
//! acknowledgement timed. It shows whether other clients' traffic stalls an innocent
//! one; the latency is a liveness check, not a benchmark.

use crate::bare_requests::{parse_produce_v7, produce_v7, read_frame};
use anyhow::{ensure, Context};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long one Produce may wait for its answer before the producer gives up on
/// the connection (and counts a failure).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// What the producer saw so far.
#[derive(Debug, Clone, Default)]
pub struct LivenessReport {
    /// When each acknowledged Produce was answered, and how long it took.
    pub acks: Vec<(Instant, Duration)>,
    /// Every failed Produce or connection, in order.
    pub failures: Vec<String>,
}

impl LivenessReport {
    /// The slowest acknowledgement.
    pub fn max_latency(&self) -> Duration {
        self.acks.iter().map(|(_, l)| *l).max().unwrap_or_default()
    }

    /// The median acknowledgement latency.
    pub fn median_latency(&self) -> Duration {
        let mut latencies: Vec<Duration> = self.acks.iter().map(|(_, l)| *l).collect();
        latencies.sort();
        latencies
            .get(latencies.len() / 2)
            .copied()
            .unwrap_or_default()
    }

    /// Acknowledgements answered at or after `since`.
    pub fn acked_since(&self, since: Instant) -> usize {
        self.acks.iter().filter(|(at, _)| *at >= since).count()
    }
}

impl std::fmt::Display for LivenessReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} acked (median {:?}, max {:?}), {} failures",
            self.acks.len(),
            self.median_latency(),
            self.max_latency(),
            self.failures.len()
        )?;
        if let Some(first) = self.failures.first() {
            write!(f, " (first: {first})")?;
        }
        Ok(())
    }
}

/// The running producer; stopped (and its thread joined) on [`stop`](Self::stop) or drop.
#[derive(Debug)]
pub struct LivenessProducer {
    stop: Arc<AtomicBool>,
    report: Arc<Mutex<LivenessReport>>,
    thread: Option<JoinHandle<()>>,
}

impl LivenessProducer {
    /// Starts producing `batch` to `topic` partition 0 through `addr`, one request
    /// every `pace` (after the previous one is answered).
    pub fn start(addr: SocketAddr, topic: &str, batch: Vec<u8>, pace: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let report = Arc::new(Mutex::new(LivenessReport::default()));
        let thread = std::thread::spawn({
            let (stop, report, topic) = (Arc::clone(&stop), Arc::clone(&report), topic.to_owned());
            move || produce_until_stopped(addr, &topic, &batch, pace, &stop, &report)
        });
        LivenessProducer {
            stop,
            report,
            thread: Some(thread),
        }
    }

    /// What was seen so far.
    pub fn report(&self) -> LivenessReport {
        self.report
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits until `n` Produce requests were acknowledged at or after `since`;
    /// fails after `timeout` with what was seen.
    pub fn wait_acked_since(
        &self,
        since: Instant,
        n: usize,
        timeout: Duration,
    ) -> anyhow::Result<LivenessReport> {
        let deadline = Instant::now() + timeout;
        loop {
            let report = self.report();
            if report.acked_since(since) >= n {
                return Ok(report);
            }
            ensure!(
                Instant::now() < deadline,
                "the well-behaved producer got {} of {n} acknowledgements within {timeout:?}: {report}",
                report.acked_since(since)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops producing and returns everything seen.
    pub fn stop(mut self) -> LivenessReport {
        self.halt();
        self.report()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for LivenessProducer {
    fn drop(&mut self) {
        self.halt();
    }
}

fn produce_until_stopped(
    addr: SocketAddr,
    topic: &str,
    batch: &[u8],
    pace: Duration,
    stop: &AtomicBool,
    report: &Mutex<LivenessReport>,
) {
    let record = |outcome: anyhow::Result<(Instant, Duration)>| {
        let mut report = report.lock().unwrap_or_else(PoisonError::into_inner);
        match outcome {
            Ok(ack) => report.acks.push(ack),
            Err(err) => report.failures.push(format!("{err:#}")),
        }
    };
    let mut connection: Option<TcpStream> = None;
    let mut correlation_id = 0i32;
    while !stop.load(Ordering::Relaxed) {
        correlation_id = correlation_id.wrapping_add(1);
        let stream = match connection.take() {
            Some(stream) => stream,
            None => match connect(addr) {
                Ok(stream) => stream,
                Err(err) => {
                    record(Err(err));
                    std::thread::sleep(pace.max(Duration::from_millis(100)));
                    continue;
                }
            },
        };
        let mut stream = stream;
        let outcome = produce_once(&mut stream, topic, batch, correlation_id);
        if outcome.is_ok() {
            connection = Some(stream);
        }
        record(outcome);
        std::thread::sleep(pace);
    }
}

fn connect(addr: SocketAddr) -> anyhow::Result<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(ANSWER_TIMEOUT))?;
    stream.set_write_timeout(Some(ANSWER_TIMEOUT))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// One Produce, answered without error: when, and how long it took.
fn produce_once(
    stream: &mut TcpStream,
    topic: &str,
    batch: &[u8],
    correlation_id: i32,
) -> anyhow::Result<(Instant, Duration)> {
    let request = produce_v7(
        correlation_id,
        -1,
        30_000,
        &[(topic.as_bytes(), vec![(0, batch)])],
    );
    let sent = Instant::now();
    stream.write_all(&request).context("sending a Produce")?;
    let body = read_frame(stream)?;
    let answered = Instant::now();
    let (received, answers) = parse_produce_v7(&body)?;
    ensure!(
        received == correlation_id,
        "answer to correlation id {received}, expected {correlation_id}"
    );
    match answers.as_slice() {
        [answer] if answer.error_code == 0 => Ok((answered, answered - sent)),
        _ => anyhow::bail!("Produce answered {answers:?}"),
    }
}
