//! Progress over the candidates, on stderr: a bar when stderr is a terminal, else a
//! line now and then once a run has taken a while (so logs of long runs show life).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use kpress_codec::Candidate;

/// A run shorter than this prints nothing when stderr is not a terminal.
const QUIET_FOR: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub(super) struct Progress {
    bar: Option<ProgressBar>,
    total: usize,
    done: usize,
    started: Instant,
    last_line: Instant,
}

impl Progress {
    pub(super) fn new(total: usize) -> Progress {
        let bar = (total > 1 && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::new(total as u64);
            bar.set_style(
                ProgressStyle::with_template(
                    "{bar:30} {pos}/{len} candidates, {elapsed} (eta {eta}) {msg}",
                )
                .expect("a valid progress template"),
            );
            bar
        });
        let now = Instant::now();
        Progress {
            bar,
            total,
            done: 0,
            started: now,
            last_line: now,
        }
    }

    /// Called before measuring each candidate.
    pub(super) fn start(&mut self, candidate: &Candidate) {
        if let Some(bar) = &self.bar {
            if self.done > 0 {
                bar.inc(1);
            }
            bar.set_message(candidate.to_string());
        } else if self.started.elapsed() >= QUIET_FOR && self.last_line.elapsed() >= QUIET_FOR {
            eprintln!(
                "kpress bench: {}/{} candidates measured, now {candidate}",
                self.done, self.total
            );
            self.last_line = Instant::now();
        }
        self.done += 1;
    }

    pub(super) fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}
