//! What the measurement tests (load, scaling, TLS overhead) share: their settings from
//! the environment, alternating rounds, medians, the pids whose CPU time and memory they
//! read, and where their reports go.

use crate::cluster::KafkaCluster;
use crate::kpress::KpressProxy;
use crate::{paths, proc_status};

/// Bytes in a MiB, the unit of peak RSS in the reports.
pub const MIB: f64 = 1_048_576.0;

/// `name` from the environment as a whole number, or `default` when unset.
pub fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a whole number")),
        Err(_) => default,
    }
}

/// Whether the kpress measured is a release build: `KPRESS_BIN` names one, or the tests
/// themselves are built in release.
pub fn release_kpress() -> bool {
    std::env::var_os("KPRESS_BIN").is_some()
        || paths::profile_dir()
            .file_name()
            .is_some_and(|n| n == "release")
}

/// Panics unless [`release_kpress`]: a debug build's figures say nothing. `script`, if
/// any, is the script that runs the measurement with a release build.
pub fn assert_release_kpress(script: Option<&str>) {
    let run = script.map_or(String::new(), |s| format!("run {s}, or "));
    assert!(
        release_kpress(),
        "measuring a debug kpress says nothing: {run}set KPRESS_BIN to a release build \
         (cargo build --release -p kpress)"
    );
}

/// The median of `values`, the mean of the middle two when there is an even number.
pub fn median(mut values: Vec<f64>) -> f64 {
    assert!(!values.is_empty(), "a median of nothing");
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if !values.len().is_multiple_of(2) {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// The smallest and largest of `values` (`(inf, 0)` for none).
pub fn range(values: impl IntoIterator<Item = f64>) -> (f64, f64) {
    values
        .into_iter()
        .fold((f64::INFINITY, 0.0), |(lo, hi), v| (lo.min(v), hi.max(v)))
}

/// `0, 1, …, n-1`, reversed in every other round, so that no setup always runs first.
pub fn round_order(round: u64, n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    if !round.is_multiple_of(2) {
        order.reverse();
    }
    order
}

/// Runs `rounds` rounds of `setups` setups (`run(index)`), every other round in reverse
/// order; each setup's results in round order.
pub fn alternating_rounds<T>(
    rounds: u64,
    setups: usize,
    mut run: impl FnMut(usize) -> T,
) -> Vec<Vec<T>> {
    let mut results: Vec<Vec<T>> = (0..setups).map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for index in round_order(round, setups) {
            results[index].push(run(index));
        }
    }
    results
}

/// The pid of the cluster's first broker: its command line names its server.properties,
/// next to its data dir.
pub fn broker_pid(cluster: &KafkaCluster) -> u32 {
    let config = cluster
        .data_dir(0)
        .parent()
        .expect("the node's dir")
        .join("server.properties");
    proc_status::pid_with_argument(&config).unwrap_or_else(|e| panic!("the broker's pid: {e:#}"))
}

/// The pid of `proxy`'s kpress process: its command line names its config file.
pub fn kpress_pid(proxy: &KpressProxy) -> u32 {
    let config = proxy.config_file().expect("the proxy's config file");
    proc_status::pid_with_argument(&config).expect("kpress's pid")
}

/// The peak RSS in MiB of process `pid`.
pub fn peak_rss_mib(pid: u32) -> f64 {
    proc_status::memory(pid).expect("kpress's memory").peak_rss as f64 / MIB
}

/// Prints `report` and writes it to the file `$variable` names, if set.
pub fn publish_report(variable: &str, report: &str) {
    println!("\n{report}");
    if let Some(path) = std::env::var_os(variable) {
        std::fs::write(&path, report).expect("writing the report");
    }
}
