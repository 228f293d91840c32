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
//! ```toml
//! [listener]
//! bind = "127.0.0.1:19092"
//! mode = "ports"                  # default: a port per broker node; or "sni"
//! advertised_host = "127.0.0.1"   # ports mode; default: bind's IP, or this host's name for a wildcard
//! node_port_base = 19100          # ports mode: node N on port node_port_base + N; default: bind's port + 100
//! rewrite_before_auth = true      # default: false with [upstream.sasl], true without
//! [listener.tls]                  # optional: TLS from clients (required in sni mode)
//! cert = "certs/kpress.pem"       # PEM certificate chain, leaf first
//! key = "certs/kpress.key"        # PEM private key
//! client_ca = "certs/clients-ca.pem"   # optional: clients must present a certificate it signed
//! client_auth = "required"        # with client_ca: "required" (default) or "requested"
//! min_version = "1.2"             # "1.2" (default) or "1.3"
//! [upstream]
//! bootstrap_servers = ["127.0.0.1:9092"]
//! topic_config_refresh_ms = 30000 # topic mode: how often topics' configs are read (1000..3600000)
//! [upstream.tls]                  # optional: TLS to the brokers
//! ca = "certs/kafka-ca.pem"       # optional; absent: the system's roots
//! cert = "certs/kpress-client.pem"     # optional, with key: a client certificate for brokers
//! key = "certs/kpress-client.key"
//! server_name = "kafka.internal"  # optional: the name checked in brokers' certificates
//! verify = true                   # false accepts any certificate (a warning at every start)
//! [upstream.sasl]                 # optional: kpress's own credentials for its side connections
//! mechanism = "SCRAM-SHA-512"     # "PLAIN", "SCRAM-SHA-256" or "SCRAM-SHA-512"
//! username = "kpress"
//! password_file = "secrets/kpress-password"   # or password_env = "KPRESS_SASL_PASSWORD"
//! [limits]                        # optional
//! max_batch_bytes = 1048588
//! [admin]                         # optional: /metrics, /healthz, /readyz, /policy
//! bind = "127.0.0.1:9464"
//! readiness_window_secs = 30      # /readyz: an upstream broker answered this recently (1..3600)
//! [log]                           # optional
//! level = "info"                  # off, error, warn, info (default), debug, trace; --log, KPRESS_LOG and RUST_LOG win
//! [shadow]                        # optional: what-if trials of live batches (absent: none)
//! candidates = ["zstd:3", "zstd:9", "gzip:6:libdeflate", "lz4:9"]   # 1..16 specs
//! sample = 0.01                   # share of each topic's batches tried (0..1], default 0.01
//! max_cpu_fraction = 0.05         # share of the host's CPUs trials may use, over 1 s (0.001..1)
//! threads = 1                     # low-priority trial threads (1..64)
//! max_queue_bytes = 4194304       # sampled bytes waiting for a thread (65536..1073741824)
//! [defaults]
//! compression.type = "topic"      # the default: what each topic's own config names
//! [[topics]]
//! match = "logs.*"                # exact name, glob, or "re:<regex>"; first match wins
//! compression.type = "zstd"
//! compression.zstd.level = 3
//! recompress = "codec-differs"    # or "always"
//! only_if_smaller = false         # true: keep the original unless the rewrite is smaller
//! [[topics]]
//! match = "archive.*"
//! compression.type = "gzip"
//! compression.gzip.provider = "libdeflate"   # auto, qat, isal, libdeflate, zlib (default)
//! ```
//!
//! `compression.type` takes Kafka's names: `producer`, `gzip`, `snappy`, `lz4`, `zstd`,
//! and `none` (the producer's name) or `uncompressed` (the topic config's name) for no
//! codec, and `topic` (the default of `[defaults]`): the codec and level the topic's own
//! configuration names, which [`PolicySet::with_topic_configs`] resolves per topic from
//! a [`TopicConfigSource`]; without one, such topics pass as sent. As Kafka's topic `compression.type` does, kpress stores the codec a policy names
//! whatever its size (limited by `max_batch_bytes`) unless `only_if_smaller = true`.
//! Every `compression.*` option of `kpress_codec` is accepted, with its range;
//! `compression.gzip.provider` (KIP-1121) is a string and also selects the provider that
//! reads gzip input of the topic, whatever its target codec.
//!
//! **sni mode** (`mode = "sni"`) serves every broker node on `bind`'s port and tells them
//! apart by the TLS server name (SNI) clients send, so it needs `[listener.tls]`. Its keys
//! replace `advertised_host` and `node_port_base`, which are errors there (and its keys
//! are errors in ports mode, never silently ignored):
//! `advertised_host_pattern = "broker-{node}.kafka.example.com"` (required: a DNS name with
//! `{node}` once, see [`HostPattern`]), `bootstrap_host` (optional: the bootstrap's own
//! name, which must not be a node's; connections without SNI reach the bootstrap too),
//! and `advertised_port` (optional: the port handed out, default `bind`'s).
//!
//! **`rewrite_before_auth`**: with `false`, a connection's batches pass through untouched
//! until it has authenticated with SASL, so an unauthenticated client cannot spend kpress's
//! CPU. The default is `false` when `[upstream.sasl]` is present (the file declares a SASL
//! cluster) and `true` otherwise; the resolved value is in [`ListenerSettings`].
//!
//! **Only `[listener] bind` and `[upstream] bootstrap_servers` are required.** Names
//! kpress does not take are refused with what to write instead: `[metrics]` is `[admin]`,
//! and `allow_growth` is the opposite of `only_if_smaller`.
//!
//! **Secrets** never sit in the policy file: `[upstream.sasl]` refuses `password` and takes
//! `password_file` or `password_env` (exactly one).
//!
//! **Files**: relative paths of certificates, keys, CAs and the password file are relative
//! to the policy file's directory (containers mount them beside the policy). [`parse`]
//! reads text alone and keeps paths as written; [`load`] resolves them and reports a named
//! file that is missing or unreadable as a problem at its key. Neither reads PEM contents
//! (the proxy's TLS loader does) nor the variable `password_env` names (it may be set only
//! where kpress runs).

mod document;
mod host_name;
pub mod overload;
mod policy_set;
mod problem;
mod restart;
mod settings;
mod topic_match;
mod topic_mode;

pub use host_name::{
    check_dns_name, HostNameError, HostPattern, DNS_LABEL_MAX_CHARS, DNS_NAME_MAX_CHARS,
};
pub use policy_set::{
    rewrite_policy, LevelChange, PolicySet, RuleLevel, CACHE_CAPACITY, DEFAULTS_RULE,
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
