//! A process's CPU time and state from Linux's `/proc/<pid>/stat`: what an attack
//! cost kpress (user + system seconds, all threads), and whether it is still running.

use anyhow::{bail, Context};
use std::process::Command;
use std::sync::OnceLock;

/// `pid`'s state letter (R, S, D, Z, …) and user + system CPU seconds so far.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcStat {
    pub state: char,
    pub cpu_seconds: f64,
}

impl ProcStat {
    /// Running or able to run: neither exited (zombie, dead) nor stopped.
    pub fn is_running(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x' | 'T' | 't')
    }
}

/// `pid`'s [`ProcStat`] now.
pub fn proc_stat(pid: u32) -> anyhow::Result<ProcStat> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    parse(&stat, clock_ticks_per_second()).with_context(|| format!("parsing {path}: {stat}"))
}

/// User + system CPU seconds `pid` used so far.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    Ok(proc_stat(pid)?.cpu_seconds)
}

/// `sysconf(_SC_CLK_TCK)`, the unit of `/proc/<pid>/stat`'s times (100 on Linux
/// everywhere in practice; asked once all the same).
fn clock_ticks_per_second() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok()?.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

fn parse(stat: &str, ticks_per_second: f64) -> anyhow::Result<ProcStat> {
    // `pid (comm) state ...`: comm may hold spaces and parentheses, so fields are
    // counted from the last ')'. After it: state is field 3, utime 14, stime 15.
    let after_comm = stat
        .rfind(')')
        .map(|at| &stat[at + 1..])
        .context("no ')' after the command name")?;
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let (Some(state), Some(utime), Some(stime)) = (fields.first(), fields.get(11), fields.get(12))
    else {
        bail!("fewer than 15 fields");
    };
    let state = state.chars().next().context("empty state")?;
    let ticks: u64 = utime.parse::<u64>()? + stime.parse::<u64>()?;
    Ok(ProcStat {
        state,
        cpu_seconds: ticks as f64 / ticks_per_second,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_state_and_cpu_seconds() {
        let stat = "4242 (kpress (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 \
                    9 0 1000 100000 2000 18446744073709551615";
        let parsed = parse(stat, 100.0).unwrap();
        assert_eq!(parsed.state, 'S');
        assert!((parsed.cpu_seconds - 3.0).abs() < 1e-9);
        assert!(parsed.is_running());
        assert!(parse("1 (x) Z 1 2", 100.0).is_err());
        let me = proc_stat(std::process::id()).unwrap();
        assert!(me.is_running() && me.cpu_seconds >= 0.0);
    }
}
