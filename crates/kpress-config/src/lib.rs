//! kpress's TOML policy file: where to listen, which brokers to front, memory limits,
//! the metrics endpoint, and per-topic compression rules under Kafka's property names.
//!
//! [`parse`] checks a text and reports every problem as
//! `FILE:LINE:COL: key = value: what is wrong (allowed: …)`; [`load`] reads a file
//! and parses it. The one look at the host: `compression.gzip.provider` must name a
//! provider this host has (`qat` needs QATzip; `qat` and `auto` probe it). [`PolicySet`] answers the proxy's per-topic question.
//!
//! ```toml
//! [listener]
//! bind = "127.0.0.1:19092"
//! advertised_host = "127.0.0.1"
//! node_port_base = 19100          # broker node N is served on port node_port_base + N
//! [upstream]
//! bootstrap_servers = ["127.0.0.1:9092"]
//! [limits]                        # optional
//! max_batch_bytes = 1048588
//! [metrics]                       # optional Prometheus endpoint
//! bind = "127.0.0.1:9464"
//! [defaults]
//! compression.type = "producer"
//! [[topics]]
//! match = "logs.*"                # exact name, glob, or "re:<regex>"; first match wins
//! compression.type = "zstd"
//! compression.zstd.level = 3
//! recompress = "codec-differs"    # or "always"
//! allow_growth = false            # use a rewrite even if larger than the original
//! [[topics]]
//! match = "archive.*"
//! compression.type = "gzip"
//! compression.gzip.provider = "libdeflate"   # auto, qat, isal, libdeflate, zlib (default)
//! ```
//!
//! `compression.type` takes Kafka's names: `producer`, `gzip`, `snappy`, `lz4`, `zstd`,
//! and `none` (the producer's name) or `uncompressed` (the topic config's name) for no
//! codec. Every `compression.*` option of `kpress_codec` is accepted, with its range;
//! `compression.gzip.provider` (KIP-1121) is a string and also selects the provider that
//! reads gzip input of the topic, whatever its target codec.

mod document;
mod policy_set;
mod problem;
mod settings;
mod topic_match;

pub use policy_set::{rewrite_policy, PolicySet, CACHE_CAPACITY};
pub use problem::{ConfigError, Problem};
pub use settings::{
    Compression, Config, Limits, ListenerSettings, MetricsSettings, TopicPolicy, TopicRule,
    UpstreamSettings, FRAME_TIMEOUT_MS_DEFAULT, IDLE_TIMEOUT_MS_DEFAULT, MAX_BATCH_BYTES_DEFAULT,
    MAX_CONNECTIONS_DEFAULT, MAX_DECOMPRESSED_BYTES_DEFAULT, MAX_DECOMPRESSION_RATIO_DEFAULT,
    MAX_FRAME_BYTES_DEFAULT, MAX_INFLIGHT_BYTES_DEFAULT, MAX_REQUEST_DECOMPRESSED_BYTES_DEFAULT,
    MAX_TOPIC_LABELS_DEFAULT,
};
pub use topic_match::{is_legal_topic_char, PatternError, TopicPattern, TOPIC_NAME_MAX_CHARS};

use std::path::Path;

/// Parses a policy file's text; `source_name` (usually the path) prefixes every problem.
pub fn parse(text: &str, source_name: &str) -> Result<Config, ConfigError> {
    document::parse_document(text, source_name).map_err(ConfigError::Invalid)
}

/// Reads and parses a policy file.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: name.clone(),
        source,
    })?;
    parse(&text, &name)
}
