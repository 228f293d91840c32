//! The in-flight memory budget: bytes of frames read but not yet forwarded.
//!
//! One budget for all connections, split evenly into a request pool and a response
//! pool. With a single pool, request frames waiting for a busy broker could hold every
//! byte while the responses that would let the broker go on wait for budget: a
//! deadlock. With two, responses can always be read while requests wait.
//!
//! Each connection draws on a pool through a [`ConnectionPool`] that caps what it
//! holds, and a frame's bytes are reserved as they arrive ([`BudgetPermit::grow`]),
//! so a client announcing a large frame and sending nothing holds nothing, and one
//! connection cannot take the whole pool.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::metrics;

/// Which way a frame travels; names the pool it is counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    Request,
    Response,
}

impl Direction {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Direction::Request => "request",
            Direction::Response => "response",
        }
    }
}

/// A frame larger than its whole pool: it could never be admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{bytes}-byte {} frame exceeds the {capacity}-byte in-flight budget for {}s (half of [limits] max_inflight_bytes: keep it at least twice max_frame_bytes)", direction.as_str(), direction.as_str())]
pub(crate) struct OverBudget {
    pub(crate) direction: Direction,
    pub(crate) bytes: usize,
    pub(crate) capacity: usize,
}

/// The request and response pools of the in-flight budget.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    requests: Pool,
    responses: Pool,
}

impl Budget {
    /// A budget of `total_bytes`, half for requests and half for responses.
    pub(crate) fn new(total_bytes: usize) -> Budget {
        let half = (total_bytes / 2).min(Semaphore::MAX_PERMITS);
        Budget {
            requests: Pool::new(Direction::Request, half),
            responses: Pool::new(Direction::Response, half),
        }
    }

    pub(crate) fn pool(&self, direction: Direction) -> &Pool {
        match direction {
            Direction::Request => &self.requests,
            Direction::Response => &self.responses,
        }
    }
}

/// One direction's share of the budget.
#[derive(Debug, Clone)]
pub(crate) struct Pool {
    direction: Direction,
    capacity: usize,
    semaphore: Arc<Semaphore>,
}

impl Pool {
    fn new(direction: Direction, capacity: usize) -> Pool {
        Pool {
            direction,
            capacity,
            semaphore: Arc::new(Semaphore::new(capacity)),
        }
    }

    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Waits until `bytes` fit, then holds them until the permit drops.
    pub(crate) async fn acquire(&self, bytes: usize) -> Result<BudgetPermit, OverBudget> {
        let permits = self.permits_for(bytes)?;
        let permit = Arc::clone(&self.semaphore)
            .acquire_many_owned(permits)
            .await
            // The semaphore is never closed.
            .map_err(|_| self.over(bytes))?;
        Ok(BudgetPermit::new(permit, None, bytes))
    }

    /// Holds `bytes` if they fit now; never waits.
    pub(crate) fn try_acquire(&self, bytes: usize) -> Option<BudgetPermit> {
        let permits = self.permits_for(bytes).ok()?;
        let permit = Arc::clone(&self.semaphore)
            .try_acquire_many_owned(permits)
            .ok()?;
        Some(BudgetPermit::new(permit, None, bytes))
    }

    fn permits_for(&self, bytes: usize) -> Result<u32, OverBudget> {
        if bytes > self.capacity {
            return Err(self.over(bytes));
        }
        u32::try_from(bytes).map_err(|_| self.over(bytes))
    }

    fn over(&self, bytes: usize) -> OverBudget {
        OverBudget {
            direction: self.direction,
            bytes,
            capacity: self.capacity,
        }
    }

    #[cfg(test)]
    pub(crate) fn available(&self) -> usize {
        self.semaphore.available_permits()
    }
}

/// One connection's draw on a [`Pool`]: it holds at most `cap` bytes of it at once.
#[derive(Debug, Clone)]
pub(crate) struct ConnectionPool {
    pool: Pool,
    cap: usize,
    own: Arc<Semaphore>,
}

impl ConnectionPool {
    /// A share of `pool` capped at `cap` bytes (at most the whole pool).
    pub(crate) fn new(pool: &Pool, cap: usize) -> ConnectionPool {
        let cap = cap.min(pool.capacity);
        ConnectionPool {
            pool: pool.clone(),
            cap,
            own: Arc::new(Semaphore::new(cap)),
        }
    }

    /// Waits until `bytes` fit both this connection's cap and the pool. The
    /// connection's own share is taken first, so a connection at its cap waits on
    /// itself without queueing in the pool.
    pub(crate) async fn acquire(&self, bytes: usize) -> Result<BudgetPermit, OverBudget> {
        let permits = self.permits_for(bytes)?;
        let own = Arc::clone(&self.own)
            .acquire_many_owned(permits)
            .await
            .map_err(|_| self.over(bytes))?;
        let mut permit = self.pool.acquire(bytes).await?;
        permit.own = Some(own);
        Ok(permit)
    }

    /// Holds `bytes` if they fit now; never waits.
    pub(crate) fn try_acquire(&self, bytes: usize) -> Option<BudgetPermit> {
        let permits = self.permits_for(bytes).ok()?;
        let own = Arc::clone(&self.own).try_acquire_many_owned(permits).ok()?;
        let mut permit = self.pool.try_acquire(bytes)?;
        permit.own = Some(own);
        Some(permit)
    }

    fn permits_for(&self, bytes: usize) -> Result<u32, OverBudget> {
        if bytes > self.cap {
            return Err(self.over(bytes));
        }
        u32::try_from(bytes).map_err(|_| self.over(bytes))
    }

    fn over(&self, bytes: usize) -> OverBudget {
        OverBudget {
            direction: self.pool.direction,
            bytes,
            capacity: self.cap,
        }
    }

    #[cfg(test)]
    pub(crate) fn available(&self) -> usize {
        self.own.available_permits()
    }
}

/// Bytes held in the budget; released (and the in-flight gauge lowered) on drop.
#[derive(Debug)]
pub(crate) struct BudgetPermit {
    pool: OwnedSemaphorePermit,
    own: Option<OwnedSemaphorePermit>,
    bytes: usize,
}

impl BudgetPermit {
    fn new(
        pool: OwnedSemaphorePermit,
        own: Option<OwnedSemaphorePermit>,
        bytes: usize,
    ) -> BudgetPermit {
        metrics::inflight_bytes_add(bytes);
        BudgetPermit { pool, own, bytes }
    }

    /// Adds `more`'s bytes to this permit; both must come from the same pools.
    pub(crate) fn grow(&mut self, mut more: BudgetPermit) {
        // `more` is dropped below with nothing left in it (its Drop lowers the gauge).
        if let Some(moved) = more.pool.split(more.pool.num_permits()) {
            self.pool.merge(moved);
        }
        match (&mut self.own, more.own.take()) {
            (Some(mine), Some(theirs)) => mine.merge(theirs),
            (mine @ None, theirs) => *mine = theirs,
            (Some(_), None) => {}
        }
        self.bytes += std::mem::take(&mut more.bytes);
    }

    /// Bytes this permit holds.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for BudgetPermit {
    fn drop(&mut self) {
        metrics::inflight_bytes_sub(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pools_are_halves_and_release_on_drop() {
        let budget = Budget::new(100);
        let requests = budget.pool(Direction::Request);
        assert_eq!(requests.capacity(), 50);
        let a = requests.acquire(30).await.unwrap();
        assert_eq!(requests.available(), 20);
        assert!(requests.try_acquire(21).is_none());
        // The response pool is untouched by requests.
        assert!(budget.pool(Direction::Response).try_acquire(50).is_some());
        drop(a);
        assert_eq!(requests.available(), 50);
    }

    #[tokio::test]
    async fn frame_larger_than_pool_is_refused_not_awaited() {
        let budget = Budget::new(100);
        let err = budget
            .pool(Direction::Response)
            .acquire(51)
            .await
            .unwrap_err();
        assert_eq!(err.bytes, 51);
        assert_eq!(err.capacity, 50);
        assert!(err.to_string().contains("response"));
    }

    #[tokio::test]
    async fn a_connection_holds_at_most_its_cap_and_permits_grow() {
        let budget = Budget::new(1000);
        let pool = budget.pool(Direction::Request);
        let a = ConnectionPool::new(pool, 200);
        let b = ConnectionPool::new(pool, 200);
        let mut held = a.acquire(150).await.unwrap();
        held.grow(a.acquire(50).await.unwrap());
        assert_eq!(held.bytes(), 200);
        assert_eq!(pool.available(), 300);
        // `a` is at its cap: it waits, while `b` still gets bytes.
        assert!(a.try_acquire(1).is_none());
        let other = b.try_acquire(200).unwrap();
        assert!(matches!(
            a.acquire(201).await,
            Err(OverBudget { capacity: 200, .. })
        ));
        drop(held);
        assert_eq!(a.available(), 200);
        assert_eq!(pool.available(), 300);
        drop(other);
        assert_eq!(pool.available(), 500);
    }

    #[tokio::test]
    async fn waiting_acquire_proceeds_when_bytes_are_released() {
        let budget = Budget::new(20);
        let pool = budget.pool(Direction::Request).clone();
        let held = pool.acquire(10).await.unwrap();
        let waiter = tokio::spawn({
            let pool = pool.clone();
            async move { pool.acquire(5).await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(held);
        waiter.await.unwrap().unwrap();
    }
}
