//! Streams a file of concatenated record batches through [`Recompressor`]s: entries are
//! read one at a time, rewritten on worker threads, and written back in input order.
//!
//! The output and counts are exactly those of one [`Recompressor::rewrite_records`] over
//! the whole input: each entry is framed here as `rewrite_records` frames it (12-byte
//! log-entry header, length, magic), a complete entry is rewritten on its own (its
//! outcome depends only on its bytes), and whatever `rewrite_records` would copy as an
//! unparseable tail is copied from the first byte it cannot frame to the end.
//!
//! Memory: the jobs in flight (runs of whole entries of about `job_bytes`; at most
//! `window_jobs` of them, and no more than `window_bytes` of input unless one job
//! alone is larger), their rewrites, and each worker's codec state. A magic 0/1 entry larger than [`MAX_HELD_COPY_BYTES`] and the
//! tail are copied in chunks, never held whole.

use kpress_batch::{
    Outcome, PassReason, Recompressor, RewritePolicy, RewriteStats, HEADER_LEN, LOG_OVERHEAD,
};
use std::collections::{BTreeMap, VecDeque};
use std::io::{self, Read, Write};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

/// Bytes of an entry read before its length and magic can be judged: `baseOffset`,
/// `length`, `partitionLeaderEpoch` and `magic`.
const ENTRY_HEAD_LEN: usize = 17;
const MAGIC_OFFSET: usize = 16;
const LENGTH_OFFSET: usize = 8;
/// A magic 0/1 entry is only ever copied; up to this size it queues with the batches
/// around it, a larger one is copied through in chunks once those are written.
pub(crate) const MAX_HELD_COPY_BYTES: usize = 1 << 20;

/// How wide the pipeline runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pipeline {
    /// Worker threads rewriting batches; 1 rewrites on the calling thread.
    pub(crate) threads: usize,
    /// Consecutive entries are handed to a worker together up to about this many
    /// bytes, so the hand-over (two thread wake-ups) is paid per job, not per batch.
    pub(crate) job_bytes: usize,
    /// Most jobs read and not yet written.
    pub(crate) window_jobs: usize,
    /// Most input bytes read and not yet written (one larger job is still let in alone).
    pub(crate) window_bytes: usize,
}

impl Pipeline {
    /// Two jobs of 1 MiB per thread keep every worker busy while the oldest is written.
    pub(crate) fn for_threads(threads: usize) -> Pipeline {
        let threads = threads.max(1);
        Pipeline {
            threads,
            job_bytes: 1 << 20,
            window_jobs: 2 * threads,
            window_bytes: threads * (2 << 20),
        }
    }
}

/// How the next entry of the input frames, judged from its first bytes as
/// `RecordBatch::parse` judges them.
enum Frame {
    /// A magic-2 entry of this many bytes (header included), or a magic 0/1 one.
    Entry { size: usize, magic_v2: bool },
    /// Not an entry: from here to the end is copied as one malformed tail.
    Tail,
}

/// Judges the entry whose first bytes are `head` (all of them if fewer than
/// [`ENTRY_HEAD_LEN`]); whether the input holds all `size` bytes is found by reading.
fn frame(head: &[u8]) -> Frame {
    if head.len() < ENTRY_HEAD_LEN {
        return Frame::Tail;
    }
    let mut length = [0u8; 4];
    length.copy_from_slice(&head[LENGTH_OFFSET..LENGTH_OFFSET + 4]);
    let Ok(length) = usize::try_from(i32::from_be_bytes(length)) else {
        return Frame::Tail;
    };
    let size = LOG_OVERHEAD + length;
    if size <= MAGIC_OFFSET {
        return Frame::Tail;
    }
    let magic_v2 = head[MAGIC_OFFSET] == 2;
    if magic_v2 && size < HEADER_LEN {
        return Frame::Tail;
    }
    Frame::Entry { size, magic_v2 }
}

/// One entry handed to a worker, numbered in input order.
struct Job {
    seq: u64,
    entry: Vec<u8>,
    out: Vec<u8>,
}

/// A worker's answer: the entry's rewrite (or copy) in `out`, and its counts.
struct Done {
    seq: u64,
    entry: Vec<u8>,
    out: Vec<u8>,
    stats: RewriteStats,
}

fn rewrite_job(recompressor: &mut Recompressor, policy: &RewritePolicy, job: Job) -> Done {
    let Job {
        seq,
        entry,
        mut out,
    } = job;
    out.clear();
    let mut stats = RewriteStats::default();
    recompressor.rewrite_records(&entry, policy, &mut out, &mut stats);
    Done {
        seq,
        entry,
        out,
        stats,
    }
}

/// Where jobs are rewritten: inline, or on a pool of worker threads.
trait Workers {
    fn dispatch(&mut self, job: Job) -> io::Result<()>;
    /// The next finished job, in any order; called only with jobs dispatched.
    fn collect(&mut self) -> io::Result<Done>;
}

/// Rewrites each job on the calling thread as it is dispatched.
struct Inline<'p> {
    recompressor: Recompressor,
    policy: &'p RewritePolicy,
    done: VecDeque<Done>,
}

impl Workers for Inline<'_> {
    fn dispatch(&mut self, job: Job) -> io::Result<()> {
        let done = rewrite_job(&mut self.recompressor, self.policy, job);
        self.done.push_back(done);
        Ok(())
    }
    fn collect(&mut self) -> io::Result<Done> {
        self.done
            .pop_front()
            .ok_or_else(|| io::Error::other("no rewrite dispatched"))
    }
}

/// Hands jobs to worker threads through one queue; answers come back on another.
struct Pool {
    jobs: Sender<Job>,
    done: Receiver<Result<Done, WorkerPanicked>>,
}

/// A worker panicked rewriting a job: reported, so the stream ends with an error
/// instead of waiting for that job forever.
struct WorkerPanicked;

impl Workers for Pool {
    fn dispatch(&mut self, job: Job) -> io::Result<()> {
        self.jobs
            .send(job)
            .map_err(|_| io::Error::other("the recompress workers stopped"))
    }
    fn collect(&mut self) -> io::Result<Done> {
        match self.done.recv() {
            Ok(Ok(done)) => Ok(done),
            Ok(Err(WorkerPanicked)) => Err(io::Error::other(
                "a recompress worker panicked rewriting a batch (a kpress bug)",
            )),
            Err(_) => Err(io::Error::other("the recompress workers stopped")),
        }
    }
}

fn worker(
    jobs: &Mutex<Receiver<Job>>,
    done: &Sender<Result<Done, WorkerPanicked>>,
    policy: &RewritePolicy,
) {
    let mut recompressor = Recompressor::new();
    loop {
        // The lock is held only to take a job, not while rewriting it.
        let job = match jobs.lock() {
            Ok(jobs) => jobs.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        // The recompressor is not used again after a panic.
        let rewritten = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rewrite_job(&mut recompressor, policy, job)
        }));
        let stop = rewritten.is_err();
        if done.send(rewritten.map_err(|_| WorkerPanicked)).is_err() || stop {
            return;
        }
    }
}

/// Reads `input` (`input_len` bytes as far as is known: it bounds what is allocated
/// for an entry before its bytes are read) and writes every entry, rewritten per
/// `policy` or copied, to `output` in input order.
pub(crate) fn recompress_stream(
    input: &mut impl Read,
    input_len: u64,
    output: &mut impl Write,
    policy: &RewritePolicy,
    pipeline: Pipeline,
) -> io::Result<RewriteStats> {
    if pipeline.threads <= 1 {
        // Rewritten as read: nothing is gained from a window without other threads.
        let pipeline = Pipeline {
            window_jobs: 1,
            ..pipeline
        };
        let mut stream = Stream::new(input, input_len, output, pipeline);
        let mut inline = Inline {
            recompressor: Recompressor::new(),
            policy,
            done: VecDeque::new(),
        };
        return stream.run(&mut inline);
    }
    let (job_tx, job_rx) = mpsc::channel::<Job>();
    let (done_tx, done_rx) = mpsc::channel();
    let job_rx = Arc::new(Mutex::new(job_rx));
    let mut stream = Stream::new(input, input_len, output, pipeline);
    std::thread::scope(|scope| {
        for _ in 0..pipeline.threads {
            let (job_rx, done_tx) = (Arc::clone(&job_rx), done_tx.clone());
            scope.spawn(move || worker(&job_rx, &done_tx, policy));
        }
        drop(done_tx);
        let mut pool = Pool {
            jobs: job_tx,
            done: done_rx,
        };
        // Dropping the pool closes the queue, which ends the workers the scope joins.
        stream.run(&mut pool)
    })
}

/// What the reader found next.
enum Next {
    /// A complete entry to rewrite (or, for magic 0/1, copy) on a worker.
    Job(Job),
    /// Bytes copied in order once every entry before them is written, never held
    /// whole: the head already read, and `more` bytes still to copy from the input
    /// (`None`: to its end), counted as one passed entry.
    Copy {
        head: Vec<u8>,
        more: Option<u64>,
    },
    End,
}

/// The reading and in-order writing side of the pipeline.
struct Stream<'a, R, W> {
    input: &'a mut R,
    /// Input bytes not yet read, as far as `input_len` knew: a bound on what is
    /// reserved for an entry before its bytes arrive.
    remaining: u64,
    output: &'a mut W,
    pipeline: Pipeline,
    stats: RewriteStats,
    next_seq: u64,
    next_to_write: u64,
    in_flight: usize,
    in_flight_bytes: usize,
    finished: BTreeMap<u64, Done>,
    /// Buffers of written jobs, reused for the next ones.
    spare: Vec<Vec<u8>>,
    /// What ended the last job early, to be handled after it.
    pending: Option<Next>,
}

impl<'a, R: Read, W: Write> Stream<'a, R, W> {
    fn new(input: &'a mut R, input_len: u64, output: &'a mut W, pipeline: Pipeline) -> Self {
        Stream {
            input,
            remaining: input_len,
            output,
            pipeline,
            stats: RewriteStats::default(),
            next_seq: 0,
            next_to_write: 0,
            in_flight: 0,
            in_flight_bytes: 0,
            finished: BTreeMap::new(),
            spare: Vec::new(),
            pending: None,
        }
    }

    fn run(&mut self, workers: &mut impl Workers) -> io::Result<RewriteStats> {
        loop {
            while self.in_flight > 0 && !self.has_room() {
                self.collect(workers)?;
            }
            match self.next()? {
                Next::Job(job) => {
                    self.in_flight += 1;
                    self.in_flight_bytes += job.entry.len();
                    workers.dispatch(job)?;
                }
                Next::Copy { head, more } => {
                    while self.in_flight > 0 {
                        self.collect(workers)?;
                    }
                    self.copy_through(head, more)?;
                }
                Next::End => break,
            }
        }
        while self.in_flight > 0 {
            self.collect(workers)?;
        }
        Ok(std::mem::take(&mut self.stats))
    }

    fn has_room(&self) -> bool {
        self.in_flight < self.pipeline.window_jobs
            && self.in_flight_bytes < self.pipeline.window_bytes
    }

    /// Takes one finished job and writes every finished one that is next in order.
    fn collect(&mut self, workers: &mut impl Workers) -> io::Result<()> {
        let done = workers.collect()?;
        self.finished.insert(done.seq, done);
        while let Some(next) = self.finished.remove(&self.next_to_write) {
            self.next_to_write += 1;
            self.in_flight -= 1;
            self.in_flight_bytes -= next.entry.len();
            self.output.write_all(&next.out)?;
            self.stats.merge(&next.stats);
            if self.spare.len() < 2 * self.pipeline.window_jobs {
                self.spare.push(next.entry);
                self.spare.push(next.out);
            }
        }
        Ok(())
    }

    /// Reads entries into one job of about `job_bytes`, or finds where copying takes over.
    fn next(&mut self) -> io::Result<Next> {
        if let Some(next) = self.pending.take() {
            return Ok(next);
        }
        let mut entries = self.spare.pop().unwrap_or_default();
        entries.clear();
        while entries.len() < self.pipeline.job_bytes {
            if let Some(other) = self.read_entry(&mut entries)? {
                if entries.is_empty() {
                    self.spare.push(entries);
                    return Ok(other);
                }
                // The entries read so far go first.
                self.pending = Some(other);
                break;
            }
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let out = self.spare.pop().unwrap_or_default();
        Ok(Next::Job(Job {
            seq,
            entry: entries,
            out,
        }))
    }

    /// Appends the next whole entry to `entries` (`None`), or says what comes instead.
    fn read_entry(&mut self, entries: &mut Vec<u8>) -> io::Result<Option<Next>> {
        let start = entries.len();
        let read = (&mut *self.input)
            .take(ENTRY_HEAD_LEN as u64)
            .read_to_end(entries)?;
        if read == 0 {
            return Ok(Some(Next::End));
        }
        let size = match frame(&entries[start..]) {
            Frame::Tail => {
                return Ok(Some(Next::Copy {
                    head: entries.split_off(start),
                    more: None,
                }))
            }
            Frame::Entry {
                size,
                magic_v2: false,
            } if size > MAX_HELD_COPY_BYTES => {
                return Ok(Some(Next::Copy {
                    head: entries.split_off(start),
                    more: Some((size - read) as u64),
                }))
            }
            Frame::Entry { size, .. } => size,
        };
        let body = (size - read) as u64;
        // A declared length is trusted no further than the input's length for room.
        entries.reserve(body.min(self.remaining) as usize);
        let got = (&mut *self.input).take(body).read_to_end(entries)?;
        if (got as u64) < body {
            // The input ended early: `rewrite_records` would see a truncated tail.
            return Ok(Some(Next::Copy {
                head: entries.split_off(start),
                more: None,
            }));
        }
        self.remaining = self.remaining.saturating_sub(size as u64);
        Ok(None)
    }

    /// Writes `head` and `more` bytes after it (or the rest of the input), in chunks,
    /// counted as one magic 0/1 entry when it is whole, else as a malformed tail.
    fn copy_through(&mut self, head: Vec<u8>, more: Option<u64>) -> io::Result<()> {
        self.output.write_all(&head)?;
        let limit = more.unwrap_or(u64::MAX);
        let copied = io::copy(&mut (&mut *self.input).take(limit), &mut *self.output)?;
        let size = head.len() as u64 + copied;
        self.remaining = self.remaining.saturating_sub(size);
        let reason = match more {
            Some(more) if copied == more => PassReason::NotMagicV2,
            _ => PassReason::Malformed,
        };
        // Entries are bounded by the input's length, which fits in memory's address space.
        let size = usize::try_from(size).unwrap_or(usize::MAX);
        self.stats.add(&Outcome::PassedThrough(reason), size);
        self.spare.push(head);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
