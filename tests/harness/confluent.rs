//! librdkafka 2.16 through confluent-kafka (`tests/python/ck_client.py` in the
//! `.cache/venv` Python): the same produce/consume surface as the Java client.

use crate::client_cli;
use crate::java_client::{ConsumeOptions, ConsumedRecord, ProduceOptions};
use crate::paths;
use std::path::Path;
use std::process::Command;

fn command(subcommand: &str) -> Command {
    let mut cmd = Command::new(paths::venv_python());
    cmd.arg(paths::tests_file("python/ck_client.py"))
        .arg(subcommand);
    cmd
}

/// Produces the lines of `file` to `topic` with confluent-kafka; checks its checksum
/// against the file's records and returns the count. `options.batch_size` is
/// librdkafka's `batch.size` (bytes of uncompressed records per batch).
pub fn produce_file(
    bootstrap: &str,
    topic: &str,
    file: &Path,
    options: &ProduceOptions,
) -> anyhow::Result<usize> {
    produce_file_to_topics(bootstrap, &[topic], file, options)
}

/// [`produce_file`] into each of `topics`, by one producer.
pub fn produce_file_to_topics(
    bootstrap: &str,
    topics: &[&str],
    file: &Path,
    options: &ProduceOptions,
) -> anyhow::Result<usize> {
    let mut cmd = command("produce");
    client_cli::add_produce_args(&mut cmd, bootstrap, topics, options);
    client_cli::produce_file(cmd, file, "confluent-kafka", topics)
}

/// Reads `count` records from `topics` with confluent-kafka, ordered by topic,
/// partition and offset.
pub fn consume(
    bootstrap: &str,
    topics: &[&str],
    count: usize,
    options: &ConsumeOptions,
) -> anyhow::Result<Vec<ConsumedRecord>> {
    client_cli::consume(
        command("consume"),
        "confluent-kafka",
        bootstrap,
        topics,
        count,
        options,
    )
}
