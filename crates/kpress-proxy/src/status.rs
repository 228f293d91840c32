//! What the proxy tells its operator's probes: whether its listeners serve, and how
//! long ago a broker last answered it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Shared with the admin endpoint; updated by the proxy as it serves.
#[derive(Debug)]
pub struct ProxyStatus {
    started: Instant,
    listening: AtomicBool,
    /// Milliseconds after `started` of the last broker answer, plus one (0: never).
    last_answer: AtomicU64,
}

impl Default for ProxyStatus {
    fn default() -> Self {
        ProxyStatus {
            started: Instant::now(),
            listening: AtomicBool::new(false),
            last_answer: AtomicU64::new(0),
        }
    }
}

impl ProxyStatus {
    /// Whether the bootstrap listener is bound and accepting (false again once
    /// shutdown begins).
    pub fn listeners_bound(&self) -> bool {
        self.listening.load(Ordering::Relaxed)
    }

    /// How long ago a broker last answered a request (a client's or kpress's own);
    /// `None` if none has yet.
    pub fn since_upstream_answer(&self) -> Option<Duration> {
        match self.last_answer.load(Ordering::Relaxed) {
            0 => None,
            at => Some(
                self.started
                    .elapsed()
                    .saturating_sub(Duration::from_millis(at - 1)),
            ),
        }
    }

    pub(crate) fn set_listening(&self, listening: bool) {
        self.listening.store(listening, Ordering::Relaxed);
    }

    pub(crate) fn upstream_answered(&self) {
        let at = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        self.last_answer.store(at + 1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_and_listening_are_reported() {
        let status = ProxyStatus::default();
        assert!(!status.listeners_bound());
        assert_eq!(status.since_upstream_answer(), None);
        status.set_listening(true);
        status.upstream_answered();
        assert!(status.listeners_bound());
        assert!(status.since_upstream_answer().unwrap() < Duration::from_secs(5));
    }
}
