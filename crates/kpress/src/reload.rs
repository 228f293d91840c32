//! What makes kpress re-read its files while serving: SIGHUP, or a change in a
//! directory holding one of them (`notify`). Each trigger bumps a generation in a
//! `watch` channel; whoever holds a receiver re-reads what it owns and keeps what is in
//! force if the new files do not load.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::{mpsc, watch};

/// Editors and secret mounts write a file in several steps: changes this close
/// together are one reload.
const SETTLE: Duration = Duration::from_millis(300);

/// Starts watching; the returned receiver changes on every SIGHUP and on every settled
/// change in the directories of `files`. Must be called inside the runtime, before
/// serving: SIGHUP's default action would end the process.
pub(crate) fn spawn(files: &[PathBuf]) -> watch::Receiver<u64> {
    let (generation, receiver) = watch::channel(0u64);
    let (changed, mut changes) = mpsc::channel::<()>(1);

    // Directories, not files: a file replaced by rename (editors, `kubectl` secret
    // updates swapping a symlink) is a new inode a file watch would lose.
    let directories: BTreeSet<PathBuf> = files
        .iter()
        .filter_map(|file| file.parent().map(Path::to_path_buf))
        .map(|dir| {
            if dir.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                dir
            }
        })
        .collect();
    let names = WatchedNames::of(files);
    let watcher = if directories.is_empty() {
        None
    } else {
        watch_directories(&directories, names, changed.clone())
    };

    let hangup = hangup_signal();
    tokio::spawn(async move {
        // Kept alive as long as the task: dropping it stops the watch.
        let _watcher = watcher;
        let mut hangup = hangup;
        loop {
            tokio::select! {
                received = recv_hangup(&mut hangup) => {
                    if !received {
                        hangup = None;
                        continue;
                    }
                    tracing::info!("SIGHUP: re-reading files");
                }
                change = changes.recv() => {
                    if change.is_none() {
                        return;
                    }
                    tokio::time::sleep(SETTLE).await;
                    while changes.try_recv().is_ok() {}
                    tracing::debug!("a watched file changed: re-reading files");
                }
            }
            generation.send_modify(|n| *n += 1);
        }
    });
    receiver
}

/// The names of the watched files: a change to another file in their directories (an
/// editor's swap file, a neighbour's log) is no reason to re-read them.
#[derive(Debug, Clone)]
struct WatchedNames(BTreeSet<std::ffi::OsString>);

impl WatchedNames {
    fn of(files: &[PathBuf]) -> WatchedNames {
        WatchedNames(
            files
                .iter()
                .filter_map(|file| file.file_name().map(ToOwned::to_owned))
                .collect(),
        )
    }

    /// Whether an event on `paths` may have changed a watched file: it names one, or a
    /// `..`-prefixed entry (a Kubernetes volume swaps its `..data` link to update every
    /// file at once), or no path at all (the watcher lost track and asks for a rescan).
    fn concern(&self, paths: &[PathBuf]) -> bool {
        paths.is_empty()
            || paths.iter().any(|path| {
                path.file_name().is_some_and(|name| {
                    self.0.contains(name) || name.to_string_lossy().starts_with("..")
                })
            })
    }
}

fn watch_directories(
    directories: &BTreeSet<PathBuf>,
    names: WatchedNames,
    changed: mpsc::Sender<()>,
) -> Option<notify::RecommendedWatcher> {
    let handler = move |event: notify::Result<notify::Event>| {
        if matches!(&event, Ok(e) if !e.kind.is_access() && names.concern(&e.paths)) {
            // Full means a reload is already due; one is enough.
            let _ = changed.try_send(());
        }
    };
    let mut watcher = match notify::recommended_watcher(handler) {
        Ok(watcher) => watcher,
        Err(err) => {
            tracing::warn!(error = %err, "cannot watch files for changes: reload with SIGHUP");
            return None;
        }
    };
    for dir in directories {
        if let Err(err) = watcher.watch(dir, RecursiveMode::NonRecursive) {
            tracing::warn!(
                dir = %dir.display(),
                error = %err,
                "cannot watch for changes: reload with SIGHUP"
            );
        }
    }
    Some(watcher)
}

#[cfg(unix)]
type Hangup = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangup = Option<()>;

#[cfg(unix)]
fn hangup_signal() -> Hangup {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::hangup()) {
        Ok(signal) => Some(signal),
        Err(err) => {
            tracing::warn!(error = %err, "cannot watch SIGHUP; files are still watched");
            None
        }
    }
}

#[cfg(not(unix))]
fn hangup_signal() -> Hangup {
    None
}

/// Waits for the next SIGHUP; `false` if there will be none.
async fn recv_hangup(hangup: &mut Hangup) -> bool {
    #[cfg(unix)]
    if let Some(signal) = hangup {
        return signal.recv().await.is_some();
    }
    #[cfg(not(unix))]
    let _ = hangup;
    std::future::pending::<bool>().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn concern(paths: &[&str]) -> bool {
        let names = WatchedNames::of(&[
            PathBuf::from("/etc/kpress/policy.toml"),
            PathBuf::from("/etc/kpress/tls/ca.pem"),
        ]);
        names.concern(&paths.iter().map(PathBuf::from).collect::<Vec<_>>())
    }

    #[test]
    fn only_changes_that_may_touch_a_watched_file_reload() {
        assert!(concern(&["/etc/kpress/policy.toml"]));
        assert!(concern(&[
            "/etc/kpress/.policy.toml.tmp",
            "/etc/kpress/policy.toml"
        ]));
        assert!(concern(&["/etc/kpress/tls/ca.pem"]));
        assert!(concern(&["/etc/kpress/..data"]));
        assert!(concern(&["/etc/kpress/..2026_11_28_14_00_00.123"]));
        assert!(concern(&[]));
        assert!(!concern(&["/etc/kpress/.policy.toml.swp"]));
        assert!(!concern(&["/etc/kpress/policy.toml~"]));
        assert!(!concern(&["/etc/kpress/notes.txt"]));
    }
}
