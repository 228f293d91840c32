//! Reading and writing whole Kafka frames on a stream, with the in-flight budget and
//! deadlines.
//!
//! A frame's budget bytes are taken as its bytes arrive, a chunk at a time, so what a
//! peer holds is what it actually sent. Once a frame's first byte is read, the whole
//! frame must arrive within the frame timeout; a write must finish within it too.

use std::pin::Pin;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use kpress_protocol::frame::{frame_body_len, FrameError, SIZE_PREFIX_LEN};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::{Instant, Sleep};

use crate::budget::{BudgetPermit, ConnectionPool, OverBudget};

/// Budget taken per step while a frame arrives: small enough that a large frame
/// never waits ahead of small ones for one big reservation.
const CHUNK_BYTES: usize = 64 << 10;

/// Capacity set aside when a frame begins: Kafka's default `max.request.size`, so a
/// typical request lands in one allocation without being moved as it grows. It is
/// address space until written (budget is taken per chunk as bytes arrive); larger
/// frames grow from there.
const FIRST_CAPACITY: usize = 1 << 20;

/// A frame as read: its size prefix and body, and the budget bytes it holds (released
/// when it is dropped).
#[derive(Debug)]
pub struct Frame {
    /// Size prefix followed by the body, ready to be written on unchanged.
    pub(crate) bytes: BytesMut,
    pub(crate) _permit: BudgetPermit,
}

impl Frame {
    /// The whole frame, size prefix included.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The frame body (request or response header, then the message).
    pub fn body(&self) -> &[u8] {
        &self.bytes[SIZE_PREFIX_LEN..]
    }
}

/// How frames are read from one peer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameLimits {
    /// Largest frame body accepted.
    pub(crate) max_frame_bytes: usize,
    /// Time for a whole frame once its first byte arrived, and for a whole write.
    pub(crate) frame_timeout: Duration,
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadFrameError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Frame(#[from] FrameError),
    #[error("{0}")]
    OverBudget(#[from] OverBudget),
    #[error("stream ended inside a frame ({read} of {expected} bytes read)")]
    EndedMidFrame { read: usize, expected: usize },
    #[error("frame not complete within {timeout:?} of its first byte ({read} of {expected} bytes read; [limits] frame_timeout_ms)")]
    TimedOut {
        read: usize,
        expected: usize,
        timeout: Duration,
    },
    /// Nothing arrived within the idle wait; nothing was consumed.
    #[error("no frame began within {0:?}")]
    Idle(Duration),
}

/// Reads one frame, its bytes granted by `pool` as they arrive. `idle` bounds the
/// wait for the first byte (`ReadFrameError::Idle`, with nothing consumed, so the
/// caller may wait again); the rest must arrive within `limits.frame_timeout`.
/// `Ok(None)`: the stream ended cleanly between frames.
pub(crate) async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    limits: FrameLimits,
    pool: &ConnectionPool,
    idle: Option<Duration>,
) -> Result<Option<Frame>, ReadFrameError> {
    read_frame_timed(reader, limits, pool, idle, &mut ReadClock::default()).await
}

/// [`read_frame`] with the deadlines of `clock`, which a connection keeps from frame to
/// frame so that its timers are not registered anew for each.
pub(crate) async fn read_frame_timed<R: AsyncRead + Unpin>(
    reader: &mut R,
    limits: FrameLimits,
    pool: &ConnectionPool,
    idle: Option<Duration>,
    clock: &mut ReadClock,
) -> Result<Option<Frame>, ReadFrameError> {
    let mut prefix = [0u8; SIZE_PREFIX_LEN];
    // `read` is cancel safe: a wait that ended idle consumed nothing.
    let first = match idle {
        Some(idle) => {
            let deadline = Instant::now() + idle;
            tokio::select! {
                biased;
                read = reader.read(&mut prefix) => read?,
                () = clock.idle.until(deadline) => return Err(ReadFrameError::Idle(idle)),
            }
        }
        None => reader.read(&mut prefix).await?,
    };
    if first == 0 {
        return Ok(None);
    }
    let mut progress = Progress {
        read: first,
        expected: SIZE_PREFIX_LEN,
    };
    let deadline = Instant::now() + limits.frame_timeout;
    let read = {
        let rest = read_rest(reader, limits, pool, prefix, &mut progress);
        tokio::select! {
            biased;
            frame = rest => Some(frame),
            () = clock.frame.until(deadline) => None,
        }
    };
    match read {
        Some(frame) => frame.map(Some),
        None => Err(ReadFrameError::TimedOut {
            read: progress.read,
            expected: progress.expected,
            timeout: limits.frame_timeout,
        }),
    }
}

/// The deadlines of one direction of a connection: waiting idle for a frame, and for
/// the rest of a frame once it began.
#[derive(Debug, Default)]
pub(crate) struct ReadClock {
    idle: Deadline,
    frame: Deadline,
}

/// A deadline on one timer that stays registered. Registering a timer earlier than
/// the runtime's next wake-up wakes its I/O driver (an `eventfd` write and, often,
/// another thread), so a connection that moved its deadlines for every frame would pay
/// that for every frame. Deadlines only move later while frames flow, so the timer is
/// left where it is and, when it fires before the deadline in force, set again: once
/// per timeout period instead of once per frame.
#[derive(Debug)]
struct Deadline {
    sleep: Pin<Box<Sleep>>,
    /// When `sleep` fires; `None` once it has fired (it must be set again to wait).
    armed: Option<Instant>,
}

impl Default for Deadline {
    fn default() -> Self {
        Deadline {
            sleep: Box::pin(tokio::time::sleep_until(Instant::now())),
            armed: None,
        }
    }
}

impl Deadline {
    /// Completes at `deadline`; cancel safe.
    async fn until(&mut self, deadline: Instant) {
        loop {
            if Instant::now() >= deadline {
                return;
            }
            if self.armed.is_none_or(|armed| armed > deadline) {
                self.sleep.as_mut().reset(deadline);
                self.armed = Some(deadline);
            }
            self.sleep.as_mut().await;
            self.armed = None;
        }
    }
}

/// How much of a frame has arrived, for errors.
#[derive(Debug)]
struct Progress {
    read: usize,
    expected: usize,
}

async fn read_rest<R: AsyncRead + Unpin>(
    reader: &mut R,
    limits: FrameLimits,
    pool: &ConnectionPool,
    mut prefix: [u8; SIZE_PREFIX_LEN],
    progress: &mut Progress,
) -> Result<Frame, ReadFrameError> {
    while progress.read < SIZE_PREFIX_LEN {
        let n = reader.read(&mut prefix[progress.read..]).await?;
        if n == 0 {
            return Err(ReadFrameError::EndedMidFrame {
                read: progress.read,
                expected: SIZE_PREFIX_LEN,
            });
        }
        progress.read += n;
    }
    let body_len = frame_body_len(prefix, limits.max_frame_bytes)?;
    let frame_len = SIZE_PREFIX_LEN + body_len;
    progress.expected = frame_len;
    let mut permit = pool.acquire(frame_len.min(CHUNK_BYTES)).await?;
    let mut bytes = BytesMut::with_capacity(frame_len.min(FIRST_CAPACITY));
    bytes.put_slice(&prefix);
    // `take` stops at the frame's end so the next frame stays in the stream.
    let mut body = AsyncReadExt::take(&mut *reader, body_len as u64);
    while bytes.len() < frame_len {
        if bytes.len() == permit.bytes() {
            let chunk = (frame_len - bytes.len()).min(CHUNK_BYTES);
            permit.grow(pool.acquire(chunk).await?);
            bytes.reserve(chunk);
        }
        // Read into the spare capacity (no zero fill), never past what is granted.
        let granted = permit.bytes() - bytes.len();
        let mut limited = (&mut body).take(granted as u64);
        let n = limited.read_buf(&mut bytes).await?;
        if n == 0 {
            return Err(ReadFrameError::EndedMidFrame {
                read: bytes.len(),
                expected: frame_len,
            });
        }
        progress.read = bytes.len();
    }
    Ok(Frame {
        bytes,
        _permit: permit,
    })
}

/// Writes bytes that already carry their size prefix, within `timeout`.
pub(crate) async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    bytes: &[u8],
    timeout: Duration,
) -> Result<(), WriteFrameError> {
    let write = async {
        writer.write_all(bytes).await?;
        writer.flush().await
    };
    tokio::time::timeout(timeout, write)
        .await
        .map_err(|_| WriteFrameError::TimedOut {
            bytes: bytes.len(),
            timeout,
        })?
        .map_err(WriteFrameError::Io)
}

/// Why a frame could not be written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WriteFrameError {
    #[error("{0}")]
    Io(std::io::Error),
    #[error("{bytes}-byte frame not written within {timeout:?} (the peer does not read; [limits] frame_timeout_ms)")]
    TimedOut { bytes: usize, timeout: Duration },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::{Budget, Direction};
    use tokio::io::AsyncWriteExt;

    fn limits(max_frame_bytes: usize) -> FrameLimits {
        FrameLimits {
            max_frame_bytes,
            frame_timeout: Duration::from_secs(5),
        }
    }

    fn share(budget: &Budget, cap: usize) -> ConnectionPool {
        ConnectionPool::new(budget.pool(Direction::Request), cap)
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_fires_at_the_deadline_in_force_whichever_came_first() {
        let mut deadline = Deadline::default();
        let start = Instant::now();
        let first = start + Duration::from_secs(5);
        // A wait cut short leaves the timer set for the first deadline.
        assert!(
            tokio::time::timeout(Duration::from_secs(1), deadline.until(first))
                .await
                .is_err()
        );
        // A later one: the timer fires at the first, and is set again for it.
        let later = start + Duration::from_secs(8);
        deadline.until(later).await;
        assert_eq!(Instant::now(), later);
        // An earlier one than the timer is set for moves the timer.
        let timer_at = Instant::now() + Duration::from_secs(30);
        assert!(
            tokio::time::timeout(Duration::from_secs(1), deadline.until(timer_at))
                .await
                .is_err()
        );
        let sooner = Instant::now() + Duration::from_secs(2);
        deadline.until(sooner).await;
        assert_eq!(Instant::now(), sooner);
    }

    #[tokio::test]
    async fn reads_frames_back_to_back_then_clean_end() {
        let budget = Budget::new(1000);
        let pool = share(&budget, 500);
        let input: &[u8] = &[0, 0, 0, 2, 7, 8, 0, 0, 0, 0, 0, 0, 0, 1, 9];
        let mut reader = input;
        let a = read_frame(&mut reader, limits(100), &pool, None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(a.body(), &[7, 8]);
        assert_eq!(&a.bytes[..], &[0, 0, 0, 2, 7, 8]);
        let b = read_frame(&mut reader, limits(100), &pool, None)
            .await
            .unwrap()
            .unwrap();
        assert!(b.body().is_empty());
        let c = read_frame(&mut reader, limits(100), &pool, None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(c.body(), &[9]);
        assert!(read_frame(&mut reader, limits(100), &pool, None)
            .await
            .unwrap()
            .is_none());
    }

    #[tokio::test]
    async fn truncated_oversized_and_negative_frames_are_errors() {
        let budget = Budget::new(1000);
        let pool = share(&budget, 500);
        let mut short: &[u8] = &[0, 0];
        assert!(matches!(
            read_frame(&mut short, limits(100), &pool, None).await,
            Err(ReadFrameError::EndedMidFrame { read: 2, .. })
        ));
        let mut cut: &[u8] = &[0, 0, 0, 5, 1, 2];
        assert!(matches!(
            read_frame(&mut cut, limits(100), &pool, None).await,
            Err(ReadFrameError::EndedMidFrame {
                read: 6,
                expected: 9
            })
        ));
        let mut big: &[u8] = &[0, 0, 1, 0];
        assert!(matches!(
            read_frame(&mut big, limits(100), &pool, None).await,
            Err(ReadFrameError::Frame(FrameError::TooLarge {
                size: 256,
                max: 100
            }))
        ));
        let mut negative: &[u8] = &[0x80, 0, 0, 0];
        assert!(matches!(
            read_frame(&mut negative, limits(100), &pool, None).await,
            Err(ReadFrameError::Frame(FrameError::NegativeSize { .. }))
        ));
        // Within max_frame_bytes but over the connection's cap: refused.
        let mut over: &[u8] = &[0, 0, 2, 0];
        assert!(matches!(
            read_frame(&mut over, limits(1000), &pool, None).await,
            Err(ReadFrameError::OverBudget(_))
        ));
        assert_eq!(budget.pool(Direction::Request).available(), 500);
    }

    #[tokio::test]
    async fn an_announced_frame_holds_only_what_arrived() {
        // 64 MiB announced, 10 bytes sent: the budget holds one chunk at most.
        let budget = Budget::new(256 << 20);
        let pool = share(&budget, 100 << 20);
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        client
            .write_all(&(64i32 << 20).to_be_bytes())
            .await
            .unwrap();
        client.write_all(&[1; 10]).await.unwrap();
        let reading = tokio::spawn(async move {
            let limits = FrameLimits {
                max_frame_bytes: 100 << 20,
                frame_timeout: Duration::from_millis(300),
            };
            read_frame(&mut server, limits, &pool, None).await
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let held = (128 << 20) - budget.pool(Direction::Request).available();
        assert!(held <= CHUNK_BYTES, "{held} bytes held for 14 received");
        // Nothing more comes: the frame times out and its bytes go back.
        let err = reading.await.unwrap().unwrap_err();
        assert!(
            matches!(err, ReadFrameError::TimedOut { read: 14, .. }),
            "{err}"
        );
        assert_eq!(budget.pool(Direction::Request).available(), 128 << 20);
        drop(client);
    }

    #[tokio::test]
    async fn a_large_frame_arrives_in_chunks_and_idle_waits_consume_nothing() {
        let budget = Budget::new(8 << 20);
        let pool = share(&budget, 4 << 20);
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        // Nothing sent: the idle wait ends without consuming anything.
        let idle = read_frame(
            &mut server,
            limits(4 << 20),
            &pool,
            Some(Duration::from_millis(50)),
        )
        .await;
        assert!(matches!(idle, Err(ReadFrameError::Idle(_))));
        let body: Vec<u8> = (0..(1 << 20) + 7).map(|i| i as u8).collect();
        let writer = tokio::spawn(async move {
            client
                .write_all(&(body.len() as i32).to_be_bytes())
                .await
                .unwrap();
            client.write_all(&body).await.unwrap();
            (client, body)
        });
        let frame = read_frame(&mut server, limits(4 << 20), &pool, None)
            .await
            .unwrap()
            .unwrap();
        let (_client, body) = writer.await.unwrap();
        assert_eq!(frame.body(), &body[..]);
        assert_eq!(frame._permit.bytes(), body.len() + 4);
    }

    #[tokio::test]
    async fn a_write_nobody_reads_times_out() {
        let (mut reader_side, mut writer_side) = tokio::io::duplex(1024);
        let err = write_frame(&mut writer_side, &[0u8; 4096], Duration::from_millis(100))
            .await
            .unwrap_err();
        assert!(matches!(err, WriteFrameError::TimedOut { bytes: 4096, .. }));
        let mut some = [0u8; 16];
        let _ = tokio::io::AsyncReadExt::read(&mut reader_side, &mut some).await;
    }
}
