//! Host names mapped to loopback in `/etc/hosts` for as long as a test holds a
//! [`HostsEntries`] (the test machines run as root): how SNI tests give every broker a
//! name of its own that real clients resolve.
//!
//! Each line added carries a tag naming this process and guard
//! (`# kpress-tests pid=<pid> guard=<n>`); dropping the guard removes exactly its own
//! lines, also while a test panics. Other test processes may edit the file at the
//! same time: every edit holds a lock directory beside the file and replaces the file
//! by a rename (in place where the file is a bind mount that cannot be renamed over).
//! Lines whose process is gone (killed, or a guard kept in a `static`) are removed by
//! the next guard created on the machine.

use anyhow::{bail, Context};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime};

const ETC_HOSTS: &str = "/etc/hosts";
const TAG: &str = "# kpress-tests pid=";
/// Longer than any edit takes: a lock this old was left by a killed process.
const STALE_LOCK: Duration = Duration::from_secs(30);
const LOCK_WAIT: Duration = Duration::from_secs(60);

/// Names mapped to 127.0.0.1 until dropped. See the module docs.
#[derive(Debug)]
pub struct HostsEntries {
    hosts_file: PathBuf,
    tag: String,
    names: Vec<String>,
}

impl HostsEntries {
    /// Maps each of `names` to 127.0.0.1 in `/etc/hosts`.
    pub fn loopback(names: &[&str]) -> anyhow::Result<HostsEntries> {
        HostsEntries::loopback_in(Path::new(ETC_HOSTS), names)
    }

    /// [`loopback`](Self::loopback) in another hosts file.
    pub fn loopback_in(hosts_file: &Path, names: &[&str]) -> anyhow::Result<HostsEntries> {
        static GUARDS: AtomicU32 = AtomicU32::new(0);
        for name in names {
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-.".contains(c))
            {
                bail!("{name:?} is not a host name");
            }
        }
        let guard = GUARDS.fetch_add(1, Ordering::Relaxed) + 1;
        let entries = HostsEntries {
            hosts_file: hosts_file.to_path_buf(),
            tag: format!("{TAG}{} guard={guard}", std::process::id()),
            names: names.iter().map(|n| n.to_string()).collect(),
        };
        edit(hosts_file, |lines| {
            lines.retain(|line| !left_by_a_dead_process(line));
            lines.extend(
                entries
                    .names
                    .iter()
                    .map(|name| format!("127.0.0.1 {name} {}", entries.tag)),
            );
        })?;
        Ok(entries)
    }

    /// The names mapped.
    pub fn names(&self) -> &[String] {
        &self.names
    }
}

impl Drop for HostsEntries {
    fn drop(&mut self) {
        let tag = &self.tag;
        if let Err(e) = edit(&self.hosts_file, |lines| {
            lines.retain(|line| !line.ends_with(tag.as_str()));
        }) {
            eprintln!(
                "could not remove the lines tagged '{tag}' from {}: {e:#}",
                self.hosts_file.display()
            );
        }
    }
}

/// Whether `line` was added by a guard of a process that no longer runs.
fn left_by_a_dead_process(line: &str) -> bool {
    let Some((_, tagged)) = line.split_once(TAG) else {
        return false;
    };
    let pid = tagged.split_whitespace().next().unwrap_or_default();
    pid.parse::<u32>()
        .is_ok_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
}

/// Applies `change` to the lines of `hosts_file` under the lock, and writes the result.
fn edit(hosts_file: &Path, change: impl FnOnce(&mut Vec<String>)) -> anyhow::Result<()> {
    let _lock = EditLock::acquire(hosts_file)?;
    let text = std::fs::read_to_string(hosts_file)
        .with_context(|| format!("reading {}", hosts_file.display()))?;
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let before = lines.clone();
    change(&mut lines);
    if lines == before {
        return Ok(());
    }
    let mut new_text = lines.join("\n");
    new_text.push('\n');
    replace(hosts_file, &new_text)
}

/// Writes `text` to a temporary file beside `path` and renames it over `path`, so a
/// resolver never reads half a file; where `path` is a mount point (Docker binds
/// `/etc/hosts`) the rename fails and the file is rewritten in place.
fn replace(path: &Path, text: &str) -> anyhow::Result<()> {
    let file_name = path.file_name().context("a hosts file name")?;
    let temp = path.with_file_name(format!(
        ".{}.kpress-tests-{}",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    let permissions = std::fs::metadata(path)?.permissions();
    std::fs::write(&temp, text).with_context(|| format!("writing {}", temp.display()))?;
    std::fs::set_permissions(&temp, permissions)?;
    if std::fs::rename(&temp, path).is_err() {
        let _ = std::fs::remove_file(&temp);
        std::fs::write(path, text).with_context(|| format!("rewriting {}", path.display()))?;
    }
    Ok(())
}

/// A lock directory beside the hosts file (creating a directory is atomic), removed
/// on drop; one older than [`STALE_LOCK`] is taken over.
struct EditLock {
    dir: PathBuf,
}

impl EditLock {
    fn acquire(hosts_file: &Path) -> anyhow::Result<EditLock> {
        let dir = hosts_file.with_file_name(format!(
            "{}.kpress-tests-lock",
            hosts_file
                .file_name()
                .context("a hosts file name")?
                .to_string_lossy()
        ));
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            match std::fs::create_dir(&dir) {
                Ok(()) => return Ok(EditLock { dir }),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    let age = std::fs::metadata(&dir)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| SystemTime::now().duration_since(t).ok());
                    if age.is_some_and(|age| age > STALE_LOCK) {
                        let _ = std::fs::remove_dir(&dir);
                        continue;
                    }
                }
                Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
            }
            if Instant::now() > deadline {
                bail!("{} still held after {LOCK_WAIT:?}", dir.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for EditLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_exactly_its_own_lines_and_those_of_dead_processes() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = dir.path().join("hosts");
        // No process has pid 999999999 (above the largest pid_max Linux allows).
        let stale = format!("127.0.0.1 old.kafka.test {TAG}999999999 guard=1");
        std::fs::write(&hosts, format!("127.0.0.1 localhost\n{stale}\n::1 ip6\n")).unwrap();
        let read = || std::fs::read_to_string(&hosts).unwrap();
        let first = HostsEntries::loopback_in(&hosts, &["a.kafka.test", "b.kafka.test"]).unwrap();
        let second = HostsEntries::loopback_in(&hosts, &["a.kafka.test"]).unwrap();
        let text = read();
        assert!(!text.contains("old.kafka.test"), "{text}");
        assert_eq!(
            text.matches("127.0.0.1 a.kafka.test # kpress-tests")
                .count(),
            2
        );
        assert!(text.starts_with("127.0.0.1 localhost\n::1 ip6\n"), "{text}");
        drop(first);
        let text = read();
        assert!(!text.contains("b.kafka.test"), "{text}");
        assert_eq!(text.matches("a.kafka.test").count(), 1, "{text}");
        let panicked = std::thread::scope(|s| {
            s.spawn(|| {
                let _entries = HostsEntries::loopback_in(&hosts, &["c.kafka.test"]).unwrap();
                panic!("a test fails while holding its names");
            })
            .join()
        });
        assert!(panicked.is_err());
        drop(second);
        assert_eq!(read(), "127.0.0.1 localhost\n::1 ip6\n");
        assert!(HostsEntries::loopback_in(&hosts, &["bad name"]).is_err());
        assert!(!dir.path().join("hosts.kpress-tests-lock").exists());
    }
}
