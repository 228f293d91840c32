//! KafkaJS (`KAFKAJS_VERSION` in `scripts/versions.sh`, from the npm registry into
//! `.cache/node` by `scripts/setup.sh`) with no codec plug-ins, through
//! `tests/node/kafkajs_client.js`: a consumer that reads gzip and uncompressed batches
//! only, and fails on lz4, snappy and zstd ("... compression not implemented"). It
//! sends ApiVersions v0-v2 (no client software name), so `client.id` is its handle,
//! and fetches with Fetch v11 at most.

use crate::client_cli;
use crate::java_client::{ConsumeOptions, ConsumedRecord};
use crate::paths;
use std::path::PathBuf;
use std::process::Command;

/// The pinned version, read from `scripts/versions.sh` so it never drifts.
pub fn kafkajs_version() -> &'static str {
    const VERSIONS_SH: &str = include_str!("../../scripts/versions.sh");
    const NAME: &str = "KAFKAJS_VERSION=";
    VERSIONS_SH
        .lines()
        .find_map(|line| line.trim().strip_prefix(NAME))
        .map(str::trim)
        .unwrap_or_else(|| panic!("scripts/versions.sh does not set {NAME}"))
}

/// `.cache/node/node_modules`, where `scripts/setup.sh` installs KafkaJS (panics with
/// "run scripts/setup.sh" if it is not there).
fn node_modules() -> PathBuf {
    let dir = paths::cache_dir().join("node").join("node_modules");
    assert!(
        dir.join("kafkajs").join("package.json").exists(),
        "KafkaJS not found in {}: run scripts/setup.sh (it installs and caches everything \
         the tests need)",
        dir.display()
    );
    dir
}

/// Reads `count` records from `topics` with KafkaJS from the beginning (a group of its
/// own unless `options.group_id` names one), ordered by topic, partition and offset.
/// `options.properties` may set `client.id` only; the error names what the consumer
/// crashed on.
pub fn consume(
    bootstrap: &str,
    topics: &[&str],
    count: usize,
    options: &ConsumeOptions,
) -> anyhow::Result<Vec<ConsumedRecord>> {
    let mut cmd = Command::new("node");
    cmd.env("NODE_PATH", node_modules())
        .arg(paths::tests_file("node/kafkajs_client.js"))
        .arg("consume");
    client_cli::consume(
        cmd,
        &format!("KafkaJS {}", kafkajs_version()),
        bootstrap,
        topics,
        count,
        options,
    )
}
