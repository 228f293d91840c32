//! The calling thread's CPU time: what one core spent, whatever else the machine runs.
//! The one reading of the clock kpress's trials, rewrite metrics and benches share.

use std::time::Duration;

/// CPU time consumed by the calling thread so far.
#[cfg(unix)]
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID is supported
    // by every unix kpress builds on.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Wall time since the first call, where no thread CPU clock exists.
#[cfg(not(unix))]
pub fn thread_cpu_time() -> Duration {
    use std::sync::OnceLock;
    use std::time::Instant;
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advances_with_work() {
        let start = thread_cpu_time();
        let mut x = 0u64;
        while thread_cpu_time() - start < Duration::from_millis(2) {
            x = x.wrapping_add(1);
        }
        assert!(x > 0);
    }
}
