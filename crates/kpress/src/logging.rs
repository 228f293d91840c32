//! kpress's log on stderr: human-readable lines (the default) or one JSON object per
//! event (`--log-format json`). The filter comes from `--log`, else `KPRESS_LOG`, else
//! `RUST_LOG`, else the policy's `[log] level` (applied by `kpress run` once it has read
//! the policy), else `info`.

use std::sync::OnceLock;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, reload, EnvFilter, Registry};

/// `--log-format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// One line per event, for people.
    #[default]
    Text,
    /// One JSON object per line (timestamp, level, target, message and fields at the
    /// top level), for log pipelines.
    Json,
}

/// Environment variables naming the filter, in the order they are read.
const FILTER_VARIABLES: [&str; 2] = ["KPRESS_LOG", "RUST_LOG"];
const DEFAULT_LEVEL: &str = "info";

/// Set when neither `--log` nor an environment variable chose the filter: the policy's
/// `[log] level` may then replace the default.
static POLICY_MAY_SET: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// Installs the process's subscriber. `--log`'s `spec` wins over the environment; a
/// bad `spec` is an error (a bad variable falls back to the next source, as before).
pub(crate) fn init(spec: Option<&str>, format: LogFormat) -> Result<(), String> {
    let from_flag = match spec {
        Some(spec) => {
            Some(EnvFilter::try_new(spec).map_err(|err| format!("--log {spec:?}: {err}"))?)
        }
        None => None,
    };
    let from_env = || {
        FILTER_VARIABLES
            .iter()
            .find_map(|name| EnvFilter::try_from_env(name).ok())
    };
    let (filter, policy_may_set) = match from_flag.or_else(from_env) {
        Some(filter) => (filter, false),
        None => (EnvFilter::new(DEFAULT_LEVEL), true),
    };
    let (filter, handle) = reload::Layer::new(filter);
    let text = (format == LogFormat::Text).then(|| {
        fmt::layer()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
    });
    let json = (format == LogFormat::Json).then(|| {
        fmt::layer()
            .json()
            .flatten_event(true)
            .with_writer(std::io::stderr)
    });
    tracing_subscriber::registry()
        .with(filter)
        .with(text)
        .with(json)
        .init();
    if policy_may_set {
        let _ = POLICY_MAY_SET.set(handle);
    }
    Ok(())
}

/// Applies the policy's `[log] level` unless `--log` or an environment variable chose
/// the filter.
pub(crate) fn apply_policy_level(level: Option<&str>) {
    let (Some(level), Some(handle)) = (level, POLICY_MAY_SET.get()) else {
        return;
    };
    match handle.reload(EnvFilter::new(level)) {
        Ok(()) => tracing::debug!(level, "log level from the policy's [log] level"),
        Err(err) => tracing::warn!(level, error = %err, "cannot apply the policy's [log] level"),
    }
}
