//! A log line per pass reason per interval, the rest counted: Produce's codec failures
//! and the batches Fetch passes to consumers as stored.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use kpress_batch::PassReason;

/// At most one log line per pass reason per interval; the lines held back are counted
/// and their number given with the next line, so a stream of corrupt batches cannot
/// flood the log yet none goes unmentioned.
#[derive(Debug)]
pub(crate) struct LogLimiter {
    interval: Duration,
    slots: Mutex<[LimiterSlot; PassReason::ALL.len()]>,
}

#[derive(Debug, Clone, Copy)]
struct LimiterSlot {
    last: Option<Instant>,
    suppressed: u64,
}

impl LogLimiter {
    pub(crate) const fn new(interval: Duration) -> LogLimiter {
        LogLimiter {
            interval,
            slots: Mutex::new(
                [LimiterSlot {
                    last: None,
                    suppressed: 0,
                }; PassReason::ALL.len()],
            ),
        }
    }

    /// `Some(lines held back since the last one)` when a line about `reason` may be
    /// written at `now`; `None` (and counted) when not.
    pub(crate) fn admit(&self, reason: PassReason, now: Instant) -> Option<u64> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = &mut slots[reason.index()];
        if slot
            .last
            .is_some_and(|last| now.saturating_duration_since(last) < self.interval)
        {
            slot.suppressed += 1;
            return None;
        }
        slot.last = Some(now);
        Some(std::mem::take(&mut slot.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_limiter_admits_one_line_per_reason_per_interval_and_counts_the_rest() {
        let limiter = LogLimiter::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let failed = PassReason::DecompressFailed;
        assert_eq!(limiter.admit(failed, t0), Some(0));
        assert_eq!(limiter.admit(failed, t0 + Duration::from_secs(1)), None);
        assert_eq!(limiter.admit(failed, t0 + Duration::from_secs(9)), None);
        // Another reason has its own allowance.
        let compress = PassReason::CompressFailed;
        assert_eq!(
            limiter.admit(compress, t0 + Duration::from_secs(2)),
            Some(0)
        );
        // Once the interval is over: a line, with the two held back.
        assert_eq!(limiter.admit(failed, t0 + Duration::from_secs(10)), Some(2));
        assert_eq!(limiter.admit(failed, t0 + Duration::from_secs(11)), None);
        assert_eq!(limiter.admit(failed, t0 + Duration::from_secs(25)), Some(1));
    }
}
