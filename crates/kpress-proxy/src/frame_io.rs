//! Reading and writing whole Kafka frames on a stream, with the in-flight budget.

use bytes::{BufMut, BytesMut};
use kpress_protocol::frame::{frame_body_len, FrameError, SIZE_PREFIX_LEN};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::budget::{BudgetPermit, OverBudget, Pool};

/// A frame as read: its size prefix and body, and the budget bytes it holds.
#[derive(Debug)]
pub(crate) struct Frame {
    /// Size prefix followed by the body, ready to be written on unchanged.
    pub(crate) bytes: BytesMut,
    pub(crate) _permit: BudgetPermit,
}

impl Frame {
    /// The frame body (request or response header, then the message).
    pub(crate) fn body(&self) -> &[u8] {
        &self.bytes[SIZE_PREFIX_LEN..]
    }
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
}

/// Reads one frame: the size prefix, then (once its bytes are granted by `pool`) the
/// body. `Ok(None)`: the stream ended cleanly between frames.
pub(crate) async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    max_frame_bytes: usize,
    pool: &Pool,
) -> Result<Option<Frame>, ReadFrameError> {
    let mut prefix = [0u8; SIZE_PREFIX_LEN];
    let mut filled = 0;
    while filled < SIZE_PREFIX_LEN {
        let n = reader.read(&mut prefix[filled..]).await?;
        if n == 0 {
            if filled == 0 {
                return Ok(None);
            }
            return Err(ReadFrameError::EndedMidFrame {
                read: filled,
                expected: SIZE_PREFIX_LEN,
            });
        }
        filled += n;
    }
    let body_len = frame_body_len(prefix, max_frame_bytes)?;
    let permit = pool.acquire(SIZE_PREFIX_LEN + body_len).await?;
    let frame_len = SIZE_PREFIX_LEN + body_len;
    let mut bytes = BytesMut::with_capacity(frame_len);
    bytes.put_slice(&prefix);
    // Read into the spare capacity (no zero-filling first); `take` stops at the frame's
    // end so the next frame stays in the stream.
    let mut body = AsyncReadExt::take(&mut *reader, body_len as u64);
    while bytes.len() < frame_len {
        if body.read_buf(&mut bytes).await? == 0 {
            return Err(ReadFrameError::EndedMidFrame {
                read: bytes.len(),
                expected: frame_len,
            });
        }
    }
    Ok(Some(Frame {
        bytes,
        _permit: permit,
    }))
}

/// Writes bytes that already carry their size prefix.
pub(crate) async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    bytes: &[u8],
) -> std::io::Result<()> {
    writer.write_all(bytes).await?;
    writer.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::{Budget, Direction};

    #[tokio::test]
    async fn reads_frames_back_to_back_then_clean_end() {
        let budget = Budget::new(1000);
        let pool = budget.pool(Direction::Request);
        let input: &[u8] = &[0, 0, 0, 2, 7, 8, 0, 0, 0, 0, 0, 0, 0, 1, 9];
        let mut reader = input;
        let a = read_frame(&mut reader, 100, pool).await.unwrap().unwrap();
        assert_eq!(a.body(), &[7, 8]);
        assert_eq!(&a.bytes[..], &[0, 0, 0, 2, 7, 8]);
        let b = read_frame(&mut reader, 100, pool).await.unwrap().unwrap();
        assert!(b.body().is_empty());
        let c = read_frame(&mut reader, 100, pool).await.unwrap().unwrap();
        assert_eq!(c.body(), &[9]);
        assert!(read_frame(&mut reader, 100, pool).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn truncated_oversized_and_negative_frames_are_errors() {
        let budget = Budget::new(1000);
        let pool = budget.pool(Direction::Request);
        let mut short: &[u8] = &[0, 0];
        assert!(matches!(
            read_frame(&mut short, 100, pool).await,
            Err(ReadFrameError::EndedMidFrame { read: 2, .. })
        ));
        let mut cut: &[u8] = &[0, 0, 0, 5, 1, 2];
        assert!(matches!(
            read_frame(&mut cut, 100, pool).await,
            Err(ReadFrameError::EndedMidFrame {
                read: 6,
                expected: 9
            })
        ));
        let mut big: &[u8] = &[0, 0, 1, 0];
        assert!(matches!(
            read_frame(&mut big, 100, pool).await,
            Err(ReadFrameError::Frame(FrameError::TooLarge {
                size: 256,
                max: 100
            }))
        ));
        let mut negative: &[u8] = &[0x80, 0, 0, 0];
        assert!(matches!(
            read_frame(&mut negative, 100, pool).await,
            Err(ReadFrameError::Frame(FrameError::NegativeSize { .. }))
        ));
        // Within max_frame_bytes but over the pool (500 bytes): refused before reading.
        let mut over: &[u8] = &[0, 0, 2, 0];
        assert!(matches!(
            read_frame(&mut over, 1000, pool).await,
            Err(ReadFrameError::OverBudget(_))
        ));
        assert_eq!(pool.available(), 500);
    }
}
