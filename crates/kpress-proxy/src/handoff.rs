//! Hand-offs between the parts of one connection, which all run on the connection's
//! one task, without waking it.
//!
//! A part that woke its own task through a channel (tokio's `mpsc`) would have the
//! task rescheduled as a yield once its poll ends, and tokio wakes an idle worker
//! thread for every task rescheduled that way, to steal it: a futex wake, and two
//! context switches, for each request and again for each response. Here a part hands an
//! item over by putting it in a queue that registers no waker, and [`run_parts`] polls
//! every part again, in the same poll of the task, while any hand-off happened.

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll};

/// Counts hand-offs, so [`run_parts`] knows when to poll the parts again.
#[derive(Debug, Default)]
pub(crate) struct Moves(AtomicU64);

impl Moves {
    fn note(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A FIFO from one part to another of the same task, holding at most `capacity` items.
#[derive(Debug)]
pub(crate) struct Handoff<'a, T> {
    items: Mutex<VecDeque<T>>,
    capacity: usize,
    closed: AtomicBool,
    moves: &'a Moves,
}

impl<'a, T> Handoff<'a, T> {
    pub(crate) fn new(capacity: usize, moves: &'a Moves) -> Handoff<'a, T> {
        Handoff {
            items: Mutex::new(VecDeque::new()),
            capacity,
            closed: AtomicBool::new(false),
            moves,
        }
    }

    fn items(&self) -> std::sync::MutexGuard<'_, VecDeque<T>> {
        self.items.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `item`, waiting while the queue is full (for the other part, polled by
    /// [`run_parts`] in the same task, to take one).
    pub(crate) async fn send(&self, item: T) {
        let mut item = Some(item);
        poll_fn(|_| {
            let mut items = self.items();
            if items.len() >= self.capacity {
                return Poll::Pending;
            }
            items.extend(item.take());
            self.moves.note();
            Poll::Ready(())
        })
        .await
    }

    /// Queues `item` at once, whatever the capacity (for a queue whose other bounds
    /// keep it short).
    pub(crate) fn push(&self, item: T) {
        self.items().push_back(item);
        self.moves.note();
    }

    /// The next item; `None` once the queue is closed and empty.
    pub(crate) async fn recv(&self) -> Option<T> {
        poll_fn(|_| {
            if let Some(item) = self.items().pop_front() {
                self.moves.note();
                return Poll::Ready(Some(item));
            }
            if self.closed.load(Ordering::Relaxed) {
                return Poll::Ready(None);
            }
            Poll::Pending
        })
        .await
    }

    /// No more items will come: the receiving part sees `None` once it took the rest.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        self.moves.note();
    }
}

/// One part's poll.
type PollPart<'a, E> = &'a mut dyn FnMut(&mut Context<'_>) -> Poll<Result<(), E>>;

/// Runs three parts of one task to completion, or to the first error. Each time the
/// task is polled, every unfinished part is polled, in order, and again while an item
/// moved between them, so a part waiting on a [`Handoff`] needs no waker.
pub(crate) async fn run_parts<E>(
    moves: &Moves,
    first: impl Future<Output = Result<(), E>>,
    second: impl Future<Output = Result<(), E>>,
    third: impl Future<Output = Result<(), E>>,
) -> Result<(), E> {
    let mut first = pin!(first);
    let mut second = pin!(second);
    let mut third = pin!(third);
    let mut done = [false; 3];
    poll_fn(|cx| loop {
        let before = moves.count();
        let parts: [PollPart<'_, E>; 3] = [
            &mut |cx| first.as_mut().poll(cx),
            &mut |cx| second.as_mut().poll(cx),
            &mut |cx| third.as_mut().poll(cx),
        ];
        for (part, done) in parts.into_iter().zip(done.iter_mut()) {
            if *done {
                continue;
            }
            match part(cx) {
                Poll::Ready(Ok(())) => *done = true,
                Poll::Ready(Err(err)) => return Poll::Ready(Err(err)),
                Poll::Pending => {}
            }
        }
        if done.iter().all(|d| *d) {
            return Poll::Ready(Ok(()));
        }
        if moves.count() == before {
            return Poll::Pending;
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn items_pass_in_order_through_a_full_queue_and_close() {
        let moves = Moves::default();
        let queue = Handoff::new(2, &moves);
        let received = Mutex::new(Vec::new());
        let producer = async {
            for i in 0..10 {
                queue.send(i).await;
            }
            queue.close();
            Ok::<(), ()>(())
        };
        let consumer = async {
            while let Some(i) = queue.recv().await {
                received.lock().unwrap().push(i);
                // A part that waits on something else between items.
                tokio::task::yield_now().await;
            }
            Ok(())
        };
        run_parts(&moves, producer, consumer, async { Ok(()) })
            .await
            .unwrap();
        assert_eq!(*received.lock().unwrap(), (0..10).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn the_first_error_ends_every_part() {
        let moves = Moves::default();
        let queue: Handoff<'_, u8> = Handoff::new(1, &moves);
        let waiting = async {
            queue.recv().await;
            Ok(())
        };
        let failing = async { Err("broken") };
        assert_eq!(
            run_parts(&moves, waiting, failing, std::future::pending()).await,
            Err("broken")
        );
    }
}
