//! File descriptors: the open-file limit (`RLIMIT_NOFILE`) `[limits] max_connections`
//! needs, raised at start, and what the accept loops do when descriptors run out all
//! the same (a limit lowered while kpress runs, or the system's table full).
//!
//! An accept loop closes a connection as it accepts it when the limit in force has no
//! room for it beside [`RESERVE`], or fewer than [`KEPT_FREE`] descriptors would be
//! left, so kpress's own opens (the policy watcher, TLS reloads, the admin endpoint,
//! side connections) still succeed. Should `accept` itself fail for
//! want of a descriptor, a spare one held open for that purpose is given up to accept
//! the waiting client and close it at once: the client is refused now rather than left
//! in the listen backlog until its own timeout. Either way the event is counted and
//! logged at most once every [`LOG_INTERVAL`].

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;

use crate::metrics;

/// Descriptors per relayed connection: the client's socket and its broker connection.
pub const PER_CONNECTION: u64 = 2;

/// Descriptors kpress needs besides its relayed connections: standard streams, the
/// runtime's own, the bootstrap listener and one per broker node (ports mode), side
/// connections to the brokers, the admin listener and its connections (at most 64),
/// the policy watcher and the files it reads, TLS files, and [`KEPT_FREE`].
pub const RESERVE: u64 = 256;

/// Of [`RESERVE`], the descriptors a client connection may not take: one that would
/// leave fewer free is closed as it is accepted.
pub const KEPT_FREE: u64 = 32;

/// At most one log line about a shortage of descriptors this often.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The first pause of an accept loop after a failed accept it could not resolve; each
/// further failure doubles it, up to [`MAX_PAUSE`], and an accepted connection resets it.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// The open-file limit `max_connections` relayed connections need.
pub fn needed(max_connections: usize) -> u64 {
    (max_connections as u64)
        .saturating_mul(PER_CONNECTION)
        .saturating_add(RESERVE)
}

/// How many connections fit in an open-file limit of `limit`.
pub fn connections_within(limit: u64) -> u64 {
    limit.saturating_sub(RESERVE) / PER_CONNECTION
}

/// The process's open-file limit; `u64::MAX` is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFileLimit {
    pub soft: u64,
    pub hard: u64,
}

/// Why kpress cannot serve with the open-file limit it was given.
#[derive(Debug, thiserror::Error)]
pub enum DescriptorError {
    #[error(
        "the open-file limit is {hard} descriptors (hard limit), and [limits] max_connections \
         = {max_connections} needs {need} ({PER_CONNECTION} per connection + {RESERVE} for \
         kpress itself), so not even one connection fits: raise the hard limit to {need} \
         (`ulimit -n {need}` in the shell that starts kpress, `LimitNOFILE={need}` in its \
         systemd unit, `--ulimit nofile={need}` for a container)"
    )]
    NoRoom {
        hard: u64,
        need: u64,
        max_connections: usize,
    },
}

/// Raises the soft open-file limit to what `max_connections` needs, up to the hard
/// limit, and logs the limit in force. A hard limit below the need is logged as an
/// error naming the fix, and kpress serves the connections that fit (the rest are
/// refused as they are accepted, counted); only a hard limit that leaves room for no
/// connection at all is an error.
pub fn raise_limit(max_connections: usize) -> Result<OpenFileLimit, DescriptorError> {
    let need = needed(max_connections);
    let before = match os::read_limit() {
        Ok(limit) => limit,
        Err(err) => {
            tracing::error!(error = %err, "cannot read the open-file limit: left as it is");
            return Ok(OpenFileLimit {
                soft: u64::MAX,
                hard: u64::MAX,
            });
        }
    };
    if before.hard < need && connections_within(before.hard) == 0 {
        return Err(DescriptorError::NoRoom {
            hard: before.hard,
            need,
            max_connections,
        });
    }
    let mut limit = before;
    if before.soft < need {
        let target = need.min(before.hard);
        match os::set_soft_limit(target, before.hard) {
            Ok(()) => limit.soft = target,
            Err(err) => tracing::error!(
                error = %err,
                target,
                "cannot raise the open-file limit"
            ),
        }
    }
    let raised = if limit.soft > before.soft {
        format!(" (raised from {})", before.soft)
    } else {
        String::new()
    };
    tracing::info!(
        "open-file limit: {}{raised}, hard limit {}; [limits] max_connections = \
         {max_connections} needs {need} ({PER_CONNECTION} per connection + {RESERVE})",
        shown(limit.soft),
        shown(limit.hard),
    );
    if limit.soft < need {
        let fit = connections_within(limit.soft);
        tracing::error!(
            "the open-file limit {} is below the {need} descriptors [limits] \
             max_connections = {max_connections} needs: about {fit} connections fit, and \
             more are refused as they are accepted; raise the hard limit to {need} \
             (`ulimit -n {need}`, systemd `LimitNOFILE={need}`, `--ulimit nofile={need}` \
             for a container) or lower [limits] max_connections to {fit}",
            shown(limit.soft),
        );
    }
    Ok(limit)
}

fn shown(limit: u64) -> String {
    if limit == u64::MAX {
        "unlimited".to_owned()
    } else {
        limit.to_string()
    }
}

/// Whether an accepted client is to be closed at once for want of descriptors: with
/// `open` connections relayed already, the soft limit in force (read each time: it may
/// be lowered under a running kpress) has no room for one more beside [`RESERVE`], or
/// its broker connection and [`KEPT_FREE`] would not fit under it. Descriptors are
/// handed out lowest first, so every one below the client's is in use.
#[cfg(unix)]
pub(crate) fn too_few_left(client: &impl std::os::fd::AsRawFd, open: usize) -> bool {
    let Ok(limit) = os::read_limit() else {
        return false;
    };
    let fd = u64::try_from(client.as_raw_fd()).unwrap_or(0);
    open as u64 >= connections_within(limit.soft) || fd + 2 + KEPT_FREE > limit.soft
}

#[cfg(not(unix))]
pub(crate) fn too_few_left<T>(_: &T, _: usize) -> bool {
    false
}

/// The spare descriptor [`refuse_waiting`] gives up; `None` until an accept loop starts,
/// or while it could not be opened again.
static SPARE: Mutex<Option<File>> = Mutex::new(None);

/// Opens the spare descriptor unless it is open.
pub(crate) fn keep_spare() {
    let mut spare = SPARE.lock().unwrap_or_else(PoisonError::into_inner);
    if spare.is_none() {
        *spare = os::open_spare().ok();
    }
}

/// Gives the spare descriptor up to accept one client waiting on `listener` and close
/// it at once, then takes the spare back. False when there was no spare or no client
/// could be accepted with it.
fn refuse_waiting(listener: &TcpListener) -> bool {
    let mut spare = SPARE.lock().unwrap_or_else(PoisonError::into_inner);
    if spare.take().is_none() {
        return false;
    }
    // The accepted socket closes as it drops: the client sees its connection end.
    let refused = socket2::SockRef::from(listener).accept().is_ok();
    *spare = os::open_spare().ok();
    refused
}

/// What an accept loop does after a failed `accept`, and how long it pauses: growing
/// while accepts keep failing, back to none after a success.
#[derive(Debug, Default)]
pub struct AcceptFailures {
    pause: Option<Duration>,
}

impl AcceptFailures {
    /// Counts and reports a failed accept on `listener` (the `listener` label), gives
    /// the spare descriptor up to refuse a waiting client if descriptors ran out, and
    /// returns how long to pause before accepting again (zero when the spare let the
    /// waiting client be refused: the next accept may succeed or refuse the next one).
    pub fn failed(&mut self, listener: &TcpListener, role: &str, err: &io::Error) -> Duration {
        if !exhausted(err) {
            metrics::accept_failed("other");
            tracing::warn!(listener = role, error = %err, "accept failed");
            return self.next_pause();
        }
        metrics::accept_failed("descriptors");
        let refused = refuse_waiting(listener);
        if refused {
            metrics::connection_refused("descriptors");
        }
        shortage(Event::AcceptFailed { refused });
        if refused {
            Duration::ZERO
        } else {
            self.next_pause()
        }
    }

    /// A connection was accepted and is served: the next failure pauses briefly again,
    /// and a shortage not logged yet is.
    pub fn succeeded(&mut self) {
        self.pause = None;
        if SHORTAGE_PENDING.load(Ordering::Relaxed) {
            shortage(Event::Accepted);
        }
    }

    fn next_pause(&mut self) -> Duration {
        let pause = self.pause.map_or(FIRST_PAUSE, |p| (p * 2).min(MAX_PAUSE));
        self.pause = Some(pause);
        pause
    }
}

/// Counts a client closed as it was accepted because too few descriptors were left.
pub(crate) fn refused_for_descriptors() {
    metrics::connection_refused("descriptors");
    shortage(Event::Refused);
}

fn exhausted(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(os::EMFILE | os::ENFILE))
}

enum Event {
    Refused,
    AcceptFailed { refused: bool },
    Accepted,
}

/// What happened since the last line about descriptors.
struct Shortage {
    last_line: Option<Instant>,
    refused: u64,
    failed: u64,
}

static SHORTAGE: Mutex<Shortage> = Mutex::new(Shortage {
    last_line: None,
    refused: 0,
    failed: 0,
});
/// Events counted and not yet logged, so a successful accept looks at [`SHORTAGE`]
/// only then.
static SHORTAGE_PENDING: AtomicBool = AtomicBool::new(false);

/// Counts `event` and logs what was counted, unless a line went out less than
/// [`LOG_INTERVAL`] ago. One record for the process: its listeners share one table.
fn shortage(event: Event) {
    let mut state = SHORTAGE.lock().unwrap_or_else(PoisonError::into_inner);
    match event {
        Event::Refused => state.refused += 1,
        Event::AcceptFailed { refused } => {
            state.failed += 1;
            state.refused += u64::from(refused);
        }
        Event::Accepted => {}
    }
    let now = Instant::now();
    let due = state
        .last_line
        .is_none_or(|at| now.duration_since(at) >= LOG_INTERVAL);
    if !due || (state.refused == 0 && state.failed == 0) {
        SHORTAGE_PENDING.store(state.refused + state.failed > 0, Ordering::Relaxed);
        return;
    }
    let soft = os::read_limit().map_or_else(|e| e.to_string(), |l| shown(l.soft));
    let since = match state.last_line {
        Some(at) => format!("in the last {} s", now.duration_since(at).as_secs()),
        None => "since start".to_owned(),
    };
    if matches!(event, Event::Accepted) {
        tracing::info!(
            refused = state.refused,
            accept_failures = state.failed,
            open_file_limit = %soft,
            "accepting connections again after a shortage of file descriptors ({since})"
        );
    } else {
        tracing::warn!(
            refused = state.refused,
            accept_failures = state.failed,
            open_file_limit = %soft,
            "out of file descriptors {since}: new connections are refused, open ones \
             served; raise the open-file limit (`ulimit -n`, systemd `LimitNOFILE`) or \
             lower [limits] max_connections (next line in {} s at the earliest)",
            LOG_INTERVAL.as_secs()
        );
    }
    state.last_line = Some(now);
    state.refused = 0;
    state.failed = 0;
    SHORTAGE_PENDING.store(false, Ordering::Relaxed);
}

#[cfg(target_os = "linux")]
mod os {
    use std::fs::File;
    use std::io;

    use super::OpenFileLimit;

    pub(super) use libc::{EMFILE, ENFILE};

    pub(super) fn read_limit() -> io::Result<OpenFileLimit> {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one rlimit through a pointer to a live local.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // RLIM_INFINITY is u64::MAX, which is what OpenFileLimit calls unlimited.
        Ok(OpenFileLimit {
            soft: limit.rlim_cur,
            hard: limit.rlim_max,
        })
    }

    pub(super) fn set_soft_limit(soft: u64, hard: u64) -> io::Result<()> {
        let limit = libc::rlimit {
            rlim_cur: soft,
            rlim_max: hard,
        };
        // SAFETY: setrlimit reads one rlimit through a pointer to a live local.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    pub(super) fn open_spare() -> io::Result<File> {
        File::open("/dev/null")
    }
}

#[cfg(not(target_os = "linux"))]
mod os {
    use std::fs::File;
    use std::io;

    use super::OpenFileLimit;

    // Never matched: only Linux's accept errors are read.
    pub(super) const EMFILE: i32 = -1;
    pub(super) const ENFILE: i32 = -2;

    pub(super) fn read_limit() -> io::Result<OpenFileLimit> {
        Err(io::ErrorKind::Unsupported.into())
    }

    pub(super) fn set_soft_limit(_: u64, _: u64) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }

    pub(super) fn open_spare() -> io::Result<File> {
        Err(io::ErrorKind::Unsupported.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_connection_needs_two_descriptors_beyond_the_reserve() {
        assert_eq!(needed(10_000), 20_000 + RESERVE);
        assert_eq!(connections_within(needed(10_000)), 10_000);
        assert_eq!(connections_within(RESERVE + 1), 0);
        assert_eq!(needed(usize::MAX), u64::MAX);
    }

    #[test]
    fn pauses_grow_to_a_cap_and_reset_on_success() {
        let mut failures = AcceptFailures::default();
        let pauses: Vec<_> = (0..10).map(|_| failures.next_pause()).collect();
        assert_eq!(pauses[0], FIRST_PAUSE);
        assert_eq!(pauses[1], FIRST_PAUSE * 2);
        assert_eq!(pauses[9], MAX_PAUSE);
        failures.succeeded();
        assert_eq!(failures.next_pause(), FIRST_PAUSE);
    }

    #[test]
    fn only_running_out_of_descriptors_gives_the_spare_up() {
        assert!(exhausted(&io::Error::from_raw_os_error(libc::EMFILE)));
        assert!(exhausted(&io::Error::from_raw_os_error(libc::ENFILE)));
        assert!(!exhausted(&io::Error::from_raw_os_error(
            libc::ECONNABORTED
        )));
    }
}
