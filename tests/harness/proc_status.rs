//! Processes seen through Linux's `/proc`: which running processes were started with a
//! given argument (a config file names its process), and a process's resident memory
//! (`VmRSS`) and its peak (`VmHWM`) from `/proc/<pid>/status`.

use anyhow::{bail, Context};
use std::path::Path;

/// The pids of running processes whose command line has `arg` as one argument.
pub fn pids_with_argument(arg: &Path) -> Vec<u32> {
    let wanted = arg.as_os_str().as_encoded_bytes();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| cmdline.split(|b| *b == 0).any(|a| a == wanted))
        })
        .collect()
}

/// The one running process started with `arg` (fails if none or several).
pub fn pid_with_argument(arg: &Path) -> anyhow::Result<u32> {
    match pids_with_argument(arg).as_slice() {
        [pid] => Ok(*pid),
        pids => bail!(
            "expected one process running with {}, found {pids:?}",
            arg.display()
        ),
    }
}

/// A process's memory, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// Resident now (`VmRSS`).
    pub rss: u64,
    /// The highest resident size so far (`VmHWM`).
    pub peak_rss: u64,
}

/// `pid`'s [`Memory`] now.
pub fn memory(pid: u32) -> anyhow::Result<Memory> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    parse_memory(&status).with_context(|| format!("no VmRSS/VmHWM in {path}"))
}

fn parse_memory(status: &str) -> Option<Memory> {
    let kib = |key: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(key))?;
        let mut words = line[key.len()..].split_whitespace();
        let value: u64 = words.next()?.parse().ok()?;
        (words.next() == Some("kB")).then_some(value * 1024)
    };
    Some(Memory {
        rss: kib("VmRSS:")?,
        peak_rss: kib("VmHWM:")?,
    })
}

/// The README's "Peak memory" bound in bytes for a kpress at the default limits
/// (max_inflight_bytes 256 MiB, max_frame_bytes 100 MiB, max_decompressed_bytes
/// 64 MiB) with T = W = this machine's CPUs, whose rules name compressors holding
/// `compressor_state_mib` of state per rewrite thread together.
pub fn readme_peak_memory_bound(compressor_state_mib: f64) -> u64 {
    let (base, inflight, frame, decompressed) = (40.0, 256.0, 100.0, 64.0);
    // ZSTD_compressBound: the input plus 1/256 of it (and a few bytes).
    let compress_bound = decompressed * (1.0 + 1.0 / 256.0);
    let decoder_state = 0.3;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let mib = base
        + inflight
        + cpus * frame
        + cpus
            * (decompressed + 3.0 * frame + compress_bound + decoder_state + compressor_state_mib);
    (mib * (1u64 << 20) as f64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rss_and_its_peak() {
        let status = "Name:\tkpress\nVmPeak:\t  900 kB\nVmHWM:\t   2048 kB\nVmRSS:\t    1024 kB\n";
        assert_eq!(
            parse_memory(status),
            Some(Memory {
                rss: 1 << 20,
                peak_rss: 2 << 20
            })
        );
        assert_eq!(parse_memory("VmRSS:\t1 kB\n"), None);
        let me = memory(std::process::id()).expect("this process's memory");
        assert!(me.rss > 0 && me.peak_rss >= me.rss);
    }
}
