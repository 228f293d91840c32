//! kpress's TOML policy file: where to listen, which brokers to front, TLS and SASL on
//! either side, memory limits, the admin endpoint, and per-topic compression rules
//! under Kafka's property names.
//!
//! [`parse`] checks a text and reports every problem as
//! `FILE:LINE:COL: key = value: what is wrong (allowed: …)`; [`load`] reads a file
//! and parses it. A file that loads may still set what cannot take effect: each such
//! setting is in [`Config::warnings`], in the same format, and
//! [`Config::restart_changes`] names what a reload changes in the sections fixed at
//! start ([`RESTART_SECTIONS`]).
//!
//! The one look at the host: `compression.gzip.provider` must name a
//! provider this host has (`qat` needs QATzip; `qat` and `auto` probe it). [`PolicySet`] answers the proxy's per-topic question.
//!
//! Every key, its default and range, and an example of each section are in the policy
//! reference, `docs/policy.md`, whose TOML examples the docs test parses and checks:
//! that page is the one description of the file, and this crate the one reader of it.

mod auto;
mod client_rules;
mod document;
mod host_name;
pub mod overload;
mod policy_set;
mod problem;
mod restart;
mod settings;
mod topic_match;
mod topic_mode;

pub use auto::{
    default_candidates, AutoBudget, AutoObjective, AutoPolicy, AutoPrices, AutopilotSettings,
    AUTOPILOT_REPLICATION_FACTOR_DEFAULT, AUTOPILOT_SHARE_DEFAULT, AUTOPILOT_TOPIC_DEFAULT,
    AUTOPILOT_WINDOW_MS_DEFAULT, AUTOPILOT_WINDOW_MS_MAX, AUTOPILOT_WINDOW_MS_MIN, AUTO_AS_SENT,
    AUTO_CANDIDATES_DEFAULT, AUTO_EXPLORE_SAMPLE, AUTO_MARGIN_DEFAULT,
    AUTO_MAX_CHANGES_PER_HOUR_DEFAULT, AUTO_MAX_CHANGES_PER_HOUR_MAX, AUTO_MAX_CORES_MAX,
    AUTO_MIN_SAMPLES_DEFAULT, AUTO_MIN_SAMPLES_MAX, AUTO_OBJECTIVE_DEFAULT, AUTO_PRICE_MAX,
    AUTO_PRICE_PER_CORE_HOUR_DEFAULT, AUTO_PRICE_PER_GB_MOVED_DEFAULT,
    AUTO_PRICE_PER_GB_STORED_DEFAULT,
};
pub use client_rules::{
    is_legal_client_id_char, is_legal_software_char, ClientRule, ClientRules, ClientSoftware,
    CodecSet, NamePattern, SoftwarePattern,
};
pub use host_name::{
    check_dns_name, HostNameError, HostPattern, DNS_LABEL_MAX_CHARS, DNS_NAME_MAX_CHARS,
};
pub use policy_set::{
    rewrite_policy, AutoChoiceSource, LevelChange, PolicySet, RuleLevel, CACHE_CAPACITY,
    DEFAULTS_RULE,
};
pub use problem::{ConfigError, Problem};
pub use restart::{RestartKeys, LIVE_SECTIONS, RESTART_SECTIONS};
pub use settings::{
    AdminSettings, BearerTokenSource, ClientAuth, Compression, Config, CpuShare, Limits,
    ListenerSettings, ListenerTls, LogSettings, NodeRouting, OverloadPolicy, OverloadSettings,
    PasswordSource, SaslMechanism, TlsVersion, TopicPolicy, TopicRule, UpstreamSasl,
    UpstreamSettings, UpstreamTls, FRAME_TIMEOUT_MS_DEFAULT, IDLE_TIMEOUT_MS_DEFAULT, LOG_LEVELS,
    MAX_BATCH_BYTES_DEFAULT, MAX_CONNECTIONS_DEFAULT, MAX_DECOMPRESSED_BYTES_DEFAULT,
    MAX_DECOMPRESSION_RATIO_DEFAULT, MAX_FRAME_BYTES_DEFAULT, MAX_INFLIGHT_BYTES_DEFAULT,
    MAX_REQUEST_DECOMPRESSED_BYTES_DEFAULT, MAX_REWRITE_WAIT_MS_DEFAULT, MAX_TOPIC_LABELS_DEFAULT,
    OVERLOAD_TARGET_WAIT_MS_DEFAULT, OVERLOAD_WINDOW_MS_DEFAULT, READINESS_WINDOW_SECS_DEFAULT,
    TOPIC_CONFIG_REFRESH_MS_DEFAULT,
};
pub use settings::{
    ConsumerSettings, CONSUMERS_CACHE_BYTES_DEFAULT, CONSUMERS_CACHE_BYTES_MAX,
    CONSUMERS_CODEC_DEFAULT,
};
pub use settings::{
    ShadowSettings, SHADOW_CANDIDATES_MAX, SHADOW_CPU_WINDOW, SHADOW_MAX_CPU_FRACTION_DEFAULT,
    SHADOW_MAX_CPU_FRACTION_MIN, SHADOW_MAX_QUEUE_BYTES_DEFAULT, SHADOW_SAMPLE_DEFAULT,
    SHADOW_THREADS_DEFAULT,
};
pub use topic_match::{is_legal_topic_char, PatternError, TopicPattern, TOPIC_NAME_MAX_CHARS};
pub use topic_mode::{TopicCompression, TopicConfigSource, TopicModePolicies};

use std::path::Path;

/// Every key a policy file may set, as dotted paths from the root: `listener.bind`,
/// `listener.tls.cert`, `upstream.sasl.mechanism`, `defaults.compression.zstd.level`,
/// `topics.match`, `shadow.candidates`, `limits.max_batch_bytes`, `admin.bind`, …
///
/// Built from the tables [`parse`] checks keys against, so the list and the parser
/// cannot disagree. `[[topics]]` keys are under `topics.`; a nested table is listed by
/// its keys (`listener.tls.cert`), not by itself.
pub fn accepted_keys() -> Vec<String> {
    document::accepted_keys()
}

/// Parses a policy file's text; `source_name` (usually the path) prefixes every problem.
/// Looks at no file: paths in the policy are kept as written.
pub fn parse(text: &str, source_name: &str) -> Result<Config, ConfigError> {
    document::parse_document(text, source_name, None).map_err(ConfigError::Invalid)
}

/// Reads and parses a policy file, resolving relative paths in it against the file's
/// directory and checking that every file it names can be read.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: name.clone(),
        source,
    })?;
    let dir = path.parent().unwrap_or(Path::new(""));
    document::parse_document(&text, &name, Some(dir)).map_err(ConfigError::Invalid)
}
