//! What a valid policy file says, as typed values.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use kpress_batch::{CompressionType, RecompressMode};
use kpress_codec::gzip_providers::{ProviderChoice, Registry};
use kpress_codec::options::GZIP_PROVIDER;
use kpress_codec::{Codec, CompressionOptions};

use crate::host_name::HostPattern;
use crate::topic_match::TopicPattern;

/// Kafka's `message.max.bytes` default: the largest record batch a broker accepts.
pub const MAX_BATCH_BYTES_DEFAULT: usize = kpress_batch::DEFAULT_MAX_BATCH_BYTES;
/// 64 x `message.max.bytes`: room for highly compressible batches, bounded all the same.
pub const MAX_DECOMPRESSED_BYTES_DEFAULT: usize = kpress_batch::DEFAULT_MAX_DECOMPRESSED_BYTES;
/// Kafka's `socket.request.max.bytes` default.
pub const MAX_FRAME_BYTES_DEFAULT: usize = 100 << 20;
/// One memory budget for the requests and responses of all connections together.
pub const MAX_INFLIGHT_BYTES_DEFAULT: usize = 256 << 20;
/// How often the cluster's topics and their compression configs are read again.
pub const TOPIC_CONFIG_REFRESH_MS_DEFAULT: u64 = 30_000;
/// Client connections open at once.
pub const MAX_CONNECTIONS_DEFAULT: usize = 10_000;
/// A frame once begun must arrive (or a response be written) within this.
pub const FRAME_TIMEOUT_MS_DEFAULT: usize = 30_000;
/// Kafka's `connections.max.idle.ms` default.
pub const IDLE_TIMEOUT_MS_DEFAULT: usize = 600_000;
/// What all batches of one Produce request may decompress to together: four of
/// `max_decompressed_bytes`.
pub const MAX_REQUEST_DECOMPRESSED_BYTES_DEFAULT: usize = 4 * MAX_DECOMPRESSED_BYTES_DEFAULT;
/// Largest decompressed/compressed size ratio a rewritten batch may have.
pub const MAX_DECOMPRESSION_RATIO_DEFAULT: usize = kpress_batch::DEFAULT_MAX_DECOMPRESSION_RATIO;
/// `[admin] readiness_window_secs` unset.
pub const READINESS_WINDOW_SECS_DEFAULT: u64 = 30;
/// Distinct topic label values in metrics before the rest are folded into one.
pub const MAX_TOPIC_LABELS_DEFAULT: usize = 1000;
/// Milliseconds a Produce rewrite may wait for a work slot: far below a producer's
/// `request.timeout.ms` (30 s), so an overloaded kpress forwards requests as sent
/// instead of letting them time out.
pub const MAX_REWRITE_WAIT_MS_DEFAULT: usize = 500;

/// A whole, valid policy file.
#[derive(Debug, Clone)]
pub struct Config {
    pub listener: ListenerSettings,
    pub upstream: UpstreamSettings,
    pub limits: Limits,
    /// `[admin]`; `None` when the file has none: no admin endpoint.
    pub admin: Option<AdminSettings>,
    /// `[defaults]`: the policy of topics no rule matches, and what rules inherit.
    pub defaults: TopicPolicy,
    /// `[[topics]]`, in file order; the first rule whose pattern matches wins.
    pub topics: Vec<TopicRule>,
    /// What the file sets that cannot take effect (a level beside topic mode, an
    /// `[overload]` key adaptive levels alone read while they are off, a rule an
    /// earlier one always wins over, …), in file order, each with its reason:
    /// `check-config` prints them (`--strict` refuses them), `kpress run` logs them at
    /// start and on reload.
    pub warnings: Vec<crate::Problem>,
    /// The keys of the sections fixed at start as written, for
    /// [`Config::restart_changes`].
    pub restart_keys: crate::RestartKeys,
    /// `[log]`: what kpress logs when no command-line flag or environment variable says.
    pub log: LogSettings,
    /// `[shadow]` as written: trial compressions of sampled live batches; `None` when
    /// the file has no `[shadow]` section. The trials that run are
    /// [`Config::trial_settings`]: auto rules add theirs.
    pub shadow: Option<ShadowSettings>,
    /// `[overload]`: whether levels adapt to load, and how it is judged.
    pub overload: OverloadSettings,
    /// `[consumers]` and `[[clients]]`: what Fetch responses are re-encoded into, for
    /// which clients.
    pub consumers: ConsumerSettings,
    /// `[autopilot]`: its defaults when the file has none.
    pub autopilot: crate::AutopilotSettings,
}

/// `[consumers]` and `[[clients]]`: stored batches a consumer cannot read are re-encoded
/// in Fetch responses into a codec it can.
#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    /// `reencode`: whether Fetch responses are re-encoded at all.
    pub reencode: bool,
    /// `codec`: what batches a consumer cannot read become, when it reads this codec
    /// (else [`crate::CodecSet::choose`] picks one it reads).
    pub codec: Codec,
    /// `compression.<codec>.level`: levels of the re-encoding, Kafka's defaults where unset.
    pub options: CompressionOptions,
    /// `cache_bytes`: the re-encoded batches kept for other consumers of the same
    /// batches, in bytes; 0 keeps none.
    pub cache_bytes: usize,
    /// `[[clients]]`: the codecs each client reads.
    pub clients: crate::ClientRules,
}

/// `[consumers] codec` unset: fast to decode, and read by every client of Fetch v4 up.
pub const CONSUMERS_CODEC_DEFAULT: Codec = Codec::Lz4;
/// `[consumers] cache_bytes` unset: 64 MiB.
pub const CONSUMERS_CACHE_BYTES_DEFAULT: usize = 64 << 20;
/// `[consumers] cache_bytes`' largest value: 16 GiB.
pub const CONSUMERS_CACHE_BYTES_MAX: usize = 16 << 30;

impl Default for ConsumerSettings {
    fn default() -> Self {
        ConsumerSettings {
            reencode: true,
            codec: CONSUMERS_CODEC_DEFAULT,
            options: CompressionOptions::default(),
            cache_bytes: CONSUMERS_CACHE_BYTES_DEFAULT,
            clients: crate::ClientRules::default(),
        }
    }
}

/// `[overload]`: levels that step down under load and back up after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverloadSettings {
    /// `adaptive`: whether rules' levels step down and back up with load.
    pub adaptive: bool,
    /// `target_wait_ms`: the mean wait for a work slot a rule's rewrites may have in a
    /// window before the window counts as pressured.
    pub target_wait_ms: u64,
    /// `window_ms`: how long each evaluation window is.
    pub window_ms: u64,
}

/// `[overload] target_wait_ms` unset: a fifth of `max_rewrite_wait_ms`' default.
pub const OVERLOAD_TARGET_WAIT_MS_DEFAULT: u64 = 100;
/// `[overload] window_ms` unset.
pub const OVERLOAD_WINDOW_MS_DEFAULT: u64 = 1000;

impl Default for OverloadSettings {
    fn default() -> Self {
        OverloadSettings {
            adaptive: false,
            target_wait_ms: OVERLOAD_TARGET_WAIT_MS_DEFAULT,
            window_ms: OVERLOAD_WINDOW_MS_DEFAULT,
        }
    }
}

/// `[shadow]`: what-if trials. A sample of each topic's batches is compressed again, on
/// a low-priority thread pool, with each candidate, and only counted: what goes to the
/// broker is never delayed or changed by it.
#[derive(Debug, Clone, PartialEq)]
pub struct ShadowSettings {
    /// `sample`: the share of each topic's batches tried, in `(0, 1]` (`0.01`: one
    /// batch in a hundred, every hundredth).
    pub sample: f64,
    /// `candidates`: the codecs and options tried, as specs (`"zstd:3"`,
    /// `"gzip:6:libdeflate"`), without repeats, at most [`SHADOW_CANDIDATES_MAX`].
    pub candidates: Vec<kpress_codec::Candidate>,
    /// `max_cpu_fraction`: the share of this host's CPUs (its available parallelism)
    /// the trials may use, averaged over [`SHADOW_CPU_WINDOW`]: `0.05` on 8 CPUs is
    /// 0.4 CPU-seconds per second. A sampled batch arriving when the trials have used
    /// their share is skipped and counted.
    pub max_cpu_fraction: f64,
    /// `threads`: worker threads of the trial pool (they run at the lowest priority).
    pub threads: usize,
    /// `max_queue_bytes`: sampled batches waiting for a worker, in bytes; a sample that
    /// would pass it is skipped and counted.
    pub max_queue_bytes: usize,
}

/// `[shadow] sample` unset.
pub const SHADOW_SAMPLE_DEFAULT: f64 = 0.01;
/// `[shadow] max_cpu_fraction` unset.
pub const SHADOW_MAX_CPU_FRACTION_DEFAULT: f64 = 0.05;
/// `[shadow] max_cpu_fraction`'s smallest value.
pub const SHADOW_MAX_CPU_FRACTION_MIN: f64 = 0.001;
/// `[shadow] threads` unset.
pub const SHADOW_THREADS_DEFAULT: usize = 1;
/// `[shadow] max_queue_bytes` unset: 4 MiB.
pub const SHADOW_MAX_QUEUE_BYTES_DEFAULT: usize = 4 << 20;
/// `[shadow] candidates`' longest list (each is a label value of the shadow metrics).
pub const SHADOW_CANDIDATES_MAX: usize = 16;
/// The window `max_cpu_fraction` is averaged over.
pub const SHADOW_CPU_WINDOW: Duration = Duration::from_secs(1);

/// `[log]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogSettings {
    /// `level`: one of [`LOG_LEVELS`]; `None` when the file does not say (kpress logs
    /// at `info`).
    pub level: Option<&'static str>,
}

/// `[log] level`'s values, least verbose first (tracing's levels).
pub const LOG_LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// `[listener]`: where clients connect, and how they tell broker nodes apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSettings {
    /// The bootstrap address clients put in `bootstrap.servers`.
    pub bind: SocketAddr,
    /// `mode`: a port per broker node, or one port with nodes named by SNI.
    pub routing: NodeRouting,
    /// `[listener.tls]`: `None` is plaintext.
    pub tls: Option<ListenerTls>,
    /// Whether a connection's batches are rewritten before it has authenticated
    /// (SaslAuthenticate succeeded). Default: `false` when `[upstream.sasl]` declares
    /// a SASL cluster (an unauthenticated client must not spend kpress's CPU), `true`
    /// otherwise.
    pub rewrite_before_auth: bool,
    /// `reuse_port` (default `false`): every listener sets `SO_REUSEPORT`, so several
    /// kpress processes with the same policy share the bootstrap and node ports (scale
    /// out on one host, or a restart without a moment nobody listens).
    pub reuse_port: bool,
}

/// `listener.mode`: how a client's connection reaches the broker node it wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeRouting {
    /// `mode = "ports"` (the default): broker node N is served on its own port.
    Ports {
        /// The host written into rewritten broker addresses (Metadata and the like).
        advertised_host: String,
        /// Broker node N is served on port `node_port_base + N`.
        node_port_base: u16,
    },
    /// `mode = "sni"`: every node on `bind`'s port, told apart by the TLS server name.
    Sni {
        /// `advertised_host_pattern`: node N's name, handed out in Metadata and the like.
        advertised_host_pattern: HostPattern,
        /// A name of the bootstrap's own; connections without SNI reach it too.
        bootstrap_host: Option<String>,
        /// The port written into rewritten broker addresses (default: `bind`'s).
        advertised_port: u16,
    },
}

/// `[listener.tls]`: TLS from clients. Paths are as written by [`crate::parse`] and
/// resolved against the policy file's directory by [`crate::load`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerTls {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key of the leaf certificate.
    pub key: PathBuf,
    /// PEM CA certificates that client certificates must be signed by (mTLS).
    pub client_ca: Option<PathBuf>,
    /// [`ClientAuth::None`] exactly when `client_ca` is `None`.
    pub client_auth: ClientAuth,
    pub min_version: TlsVersion,
}

/// `listener.tls.client_auth`: whether clients present a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// No `client_ca`: no certificate is asked for.
    None,
    /// `"requested"`: asked for; a client without one is let in, one with a bad one is not.
    Requested,
    /// `"required"` (the default with `client_ca`): a client without one is refused.
    Required,
}

impl ClientAuth {
    /// The policy file's spelling (`none` is never written: it is the absence of `client_ca`).
    pub fn name(self) -> &'static str {
        match self {
            ClientAuth::None => "none",
            ClientAuth::Requested => "requested",
            ClientAuth::Required => "required",
        }
    }
}

/// `listener.tls.min_version`: the oldest TLS version clients may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    /// `"1.2"`, the default.
    Tls12,
    /// `"1.3"`.
    Tls13,
}

impl TlsVersion {
    /// The policy file's spelling: `1.2`, `1.3`.
    pub fn name(self) -> &'static str {
        match self {
            TlsVersion::Tls12 => "1.2",
            TlsVersion::Tls13 => "1.3",
        }
    }
}

/// `[upstream]`: the real brokers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamSettings {
    /// `host:port` entries, as in Kafka's `bootstrap.servers`.
    pub bootstrap_servers: Vec<String>,
    /// `topic_config_refresh_ms`: how often kpress reads the cluster's topics and their
    /// compression configs again (topic mode, topic labels).
    pub topic_config_refresh: Duration,
    /// `[upstream.tls]`: `None` is plaintext to the brokers.
    pub tls: Option<UpstreamTls>,
    /// `[upstream.sasl]` with a username and password (PLAIN, SCRAM): kpress's own
    /// credentials, for its side connections only.
    pub sasl: Option<UpstreamSasl>,
    /// `[upstream.sasl]` with `mechanism = "OAUTHBEARER"`: where kpress's own bearer
    /// tokens come from. At most one of `sasl` and `oauthbearer` is set.
    pub oauthbearer: Option<BearerTokenSource>,
}

/// `[upstream.tls]`: TLS to the brokers. Paths as in [`ListenerTls`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTls {
    /// PEM CA certificates brokers' certificates are checked against; `None`: the
    /// system's roots.
    pub ca: Option<PathBuf>,
    /// `cert` and `key`: kpress's certificate chain and private key, for brokers that
    /// require client certificates (mTLS).
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// The name checked in brokers' certificates instead of the host kpress connects to
    /// (a DNS name or an IP address).
    pub server_name: Option<String>,
    /// `false` accepts any certificate: the binary warns at every start.
    pub verify: bool,
}

/// `[upstream.sasl]`: how kpress authenticates its own connections to the brokers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamSasl {
    pub mechanism: SaslMechanism,
    pub username: String,
    /// Where the password is read from; never the policy file itself.
    pub password: PasswordSource,
}

/// `upstream.sasl.mechanism`, spelled as Kafka's `sasl.mechanism`.
pub use kpress_protocol::sasl::Mechanism as SaslMechanism;

/// Where kpress's OAUTHBEARER tokens come from: exactly one source per policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BearerTokenSource {
    /// An OAuth 2 token endpoint, client-credentials grant.
    ClientCredentials {
        /// `token_endpoint_url`: `http://` or `https://`.
        token_endpoint_url: String,
        client_id: String,
        /// `client_secret_file` or `client_secret_env`.
        client_secret: PasswordSource,
        /// `scope`, sent when set.
        scope: Option<String>,
    },
    /// `token_file`: a file another program keeps fresh, re-read when it changes.
    TokenFile(PathBuf),
    /// `token_provider = "aws_msk_iam"`: an MSK IAM token signed for `region` with the
    /// standard AWS credential environment.
    AwsMskIam { region: String },
}

/// Where kpress's SASL password is: the policy file names its place, never the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PasswordSource {
    /// `password_file`: the file's contents, less one trailing line break (`echo` and
    /// secret stores add one).
    File(PathBuf),
    /// `password_env`: the environment variable's value, read when kpress starts.
    Env(String),
}

/// `[limits]`: bounds on memory, with Kafka-aligned defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A rewritten batch larger than this is not used (the original goes on).
    pub max_batch_bytes: usize,
    /// A batch whose records decompress to more than this passes through untouched.
    pub max_decompressed_bytes: usize,
    /// Largest Kafka frame accepted from a client or broker.
    pub max_frame_bytes: usize,
    /// Bytes of requests and responses held at once, all connections together.
    pub max_inflight_bytes: usize,
    /// Bytes one connection may hold in each direction of that budget (default:
    /// `max_frame_bytes`, so one largest frame fits).
    pub max_connection_inflight_bytes: usize,
    /// Client connections open at once; more are closed as they are accepted.
    pub max_connections: usize,
    /// Milliseconds a begun frame may take to arrive, or a response to be written.
    pub frame_timeout_ms: usize,
    /// Milliseconds a client connection may sit with nothing to read or answer.
    pub idle_timeout_ms: usize,
    /// What all batches of one Produce request may decompress to together.
    pub max_request_decompressed_bytes: usize,
    /// A batch inflating more than this many times its compressed size passes through.
    pub max_decompression_ratio: usize,
    /// Distinct topic label values in metrics; further topics share `_other`.
    pub max_topic_labels: usize,
    /// Milliseconds a Produce request's rewrite may wait for a work slot; past it the
    /// request is forwarded as sent.
    pub max_rewrite_wait_ms: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_batch_bytes: MAX_BATCH_BYTES_DEFAULT,
            max_decompressed_bytes: MAX_DECOMPRESSED_BYTES_DEFAULT,
            max_frame_bytes: MAX_FRAME_BYTES_DEFAULT,
            max_inflight_bytes: MAX_INFLIGHT_BYTES_DEFAULT,
            max_connection_inflight_bytes: MAX_FRAME_BYTES_DEFAULT,
            max_connections: MAX_CONNECTIONS_DEFAULT,
            frame_timeout_ms: FRAME_TIMEOUT_MS_DEFAULT,
            idle_timeout_ms: IDLE_TIMEOUT_MS_DEFAULT,
            max_request_decompressed_bytes: MAX_REQUEST_DECOMPRESSED_BYTES_DEFAULT,
            max_decompression_ratio: MAX_DECOMPRESSION_RATIO_DEFAULT,
            max_topic_labels: MAX_TOPIC_LABELS_DEFAULT,
            max_rewrite_wait_ms: MAX_REWRITE_WAIT_MS_DEFAULT,
        }
    }
}

/// `[admin]`: the HTTP endpoint of metrics, health and the policy in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdminSettings {
    pub bind: SocketAddr,
    /// `readiness_window_secs`: how recently an upstream broker must have answered for
    /// kpress to report itself ready.
    pub readiness_window: Duration,
}

/// `compression.type` of a policy: keep what the producer sent, one of Kafka's codecs,
/// or `topic`: whatever the topic's own configuration names, at its own level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// `producer`: keep whatever the producer sent.
    Producer,
    /// A codec; `none` and `uncompressed` are both [`Codec::None`].
    Codec(Codec),
    /// `topic`: the topic's own `compression.type` and `compression.<codec>.level`,
    /// learned from the cluster.
    Topic,
    /// `auto`: per topic, the `auto.candidates` codec the autopilot chooses from shadow
    /// trials (see [`crate::AutoPolicy`]).
    Auto,
}

impl Compression {
    /// The values [`FromStr`](std::str::FromStr) accepts, for error messages.
    pub const ALLOWED: &'static str =
        "topic, auto, producer, none (or uncompressed), gzip, snappy, lz4, zstd";

    /// `topic`, `producer` or the codec's name.
    pub fn name(self) -> &'static str {
        match self {
            Compression::Producer => "producer",
            Compression::Codec(codec) => codec.name(),
            Compression::Topic => "topic",
            Compression::Auto => "auto",
        }
    }

    /// The fixed `compression.type` a policy names; `None` in topic mode and `auto`.
    pub fn fixed(self) -> Option<CompressionType> {
        match self {
            Compression::Producer => Some(CompressionType::Producer),
            Compression::Codec(codec) => Some(CompressionType::Codec(codec)),
            Compression::Topic | Compression::Auto => None,
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Compression {
    type Err = kpress_batch::UnknownTarget;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "topic" => return Ok(Compression::Topic),
            "auto" => return Ok(Compression::Auto),
            _ => {}
        }
        Ok(match s.parse::<CompressionType>()? {
            CompressionType::Producer => Compression::Producer,
            CompressionType::Codec(codec) => Compression::Codec(codec),
        })
    }
}

/// What happens to the batches of one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicPolicy {
    pub compression: Compression,
    /// Every `compression.*` option, Kafka's defaults where the file says nothing.
    pub options: CompressionOptions,
    /// `recompress`: whether a batch already in the target codec is re-encoded.
    pub recompress: RecompressMode,
    /// `only_if_smaller`: keep the original batch when the rewrite is not smaller.
    /// Off by default: the policy's codec is stored, as Kafka's topic
    /// `compression.type` stores its codec.
    pub only_if_smaller: bool,
    /// `overload.*`: what the topic's batches become under overload.
    pub overload: OverloadPolicy,
    /// `auto.*`: read when `compression` is [`Compression::Auto`], its defaults
    /// otherwise.
    pub auto: crate::AutoPolicy,
}

impl Default for TopicPolicy {
    fn default() -> Self {
        TopicPolicy {
            compression: Compression::Topic,
            options: CompressionOptions::default(),
            recompress: RecompressMode::default(),
            only_if_smaller: false,
            overload: OverloadPolicy::default(),
            auto: crate::AutoPolicy::default(),
        }
    }
}

/// A rule's `overload.*` keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverloadPolicy {
    /// `overload.compression.type`: the codec a request's batches are rewritten into
    /// when no work slot was free within `max_rewrite_wait_ms`; `producer` (the
    /// default): they pass as sent.
    pub compression: Compression,
    /// `overload.compression.<codec>.level`: the fallback's levels (Kafka's defaults
    /// where unset); the fallback's other options are the rule's.
    pub levels: CompressionOptions,
    /// `overload.min_level`: the lowest level adaptive steps may reach; `None`: the
    /// bottom of the codec's ladder.
    pub min_level: Option<i32>,
    /// `overload.max_cpu_share`: the share of kpress's rewrite CPU (its work slots over
    /// an `[overload]` window) the rule's topics may spend before the rest of their
    /// requests in that window take the fallback; `None`: no cap.
    pub max_cpu_share: Option<CpuShare>,
}

/// A fraction of kpress's rewrite CPU, in `(0, 1]`.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct CpuShare(f64);

// Never NaN: `CpuShare::new` takes only finite fractions.
impl Eq for CpuShare {}

impl CpuShare {
    /// `fraction` if it is in `(0, 1]`.
    pub fn new(fraction: f64) -> Option<CpuShare> {
        (fraction.is_finite() && fraction > 0.0 && fraction <= 1.0).then_some(CpuShare(fraction))
    }

    pub fn fraction(self) -> f64 {
        self.0
    }
}

impl fmt::Display for CpuShare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Default for OverloadPolicy {
    fn default() -> Self {
        OverloadPolicy {
            compression: Compression::Producer,
            levels: CompressionOptions::default(),
            min_level: None,
            max_cpu_share: None,
        }
    }
}

impl OverloadPolicy {
    /// The fallback's codec options: `rule`'s, with the fallback's levels.
    pub fn options(&self, rule: &CompressionOptions) -> CompressionOptions {
        let mut options = rule.clone();
        for key in crate::overload::LEVEL_KEYS {
            let level = self.levels.get(key).expect("a level key");
            options
                .set_int(key, level)
                .expect("a level read within its range");
        }
        options
    }
}

/// Prints the policy as an operator reads it: the codec with its own options only.
impl fmt::Display for TopicPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let codec = match self.compression {
            Compression::Producer => return f.write_str("producer (batches pass as sent)"),
            Compression::Codec(codec) => codec,
            Compression::Topic => return self.fmt_topic_mode(f),
            Compression::Auto => return self.fmt_auto(f),
        };
        f.write_str(codec.name())?;
        let prefix = format!("compression.{}.", codec.name());
        let mut own: Vec<String> = kpress_codec::options::OPTION_KEYS
            .iter()
            .filter(|key| key.starts_with(&prefix))
            .filter_map(|key| Some(format!("{key}={}", self.options.get(key)?)))
            .collect();
        let provider = self.options.gzip_provider();
        let provider_text = match provider {
            // Only a configured `auto` was resolved (and QATzip probed) already.
            ProviderChoice::Auto => {
                format!("{GZIP_PROVIDER}=auto ({})", Registry::global().auto_kind())
            }
            other => format!("{GZIP_PROVIDER}={other}"),
        };
        if codec == Codec::Gzip {
            own.push(provider_text.clone());
        }
        if !own.is_empty() {
            write!(f, " ({})", own.join(", "))?;
        }
        // The provider also reads gzip input, whatever the target codec.
        if codec != Codec::Gzip && provider != ProviderChoice::Default {
            write!(f, ", gzip input read by {provider_text}")?;
        }
        write!(f, ", recompress {}", self.recompress.name())?;
        if self.only_if_smaller {
            f.write_str(", only if smaller")?;
        }
        if let Compression::Codec(fallback) = self.overload.compression {
            write!(f, ", under overload {}", fallback.name())?;
            if let Some(key) = crate::overload::level_key(fallback) {
                write!(f, " ({key}={})", self.overload.levels.get(key).unwrap_or(0))?;
            }
        }
        if let Some(min) = self.overload.min_level {
            write!(f, ", overload.min_level={min}")?;
        }
        if let Some(share) = self.overload.max_cpu_share {
            write!(f, ", overload.max_cpu_share={share}")?;
        }
        Ok(())
    }
}

impl TopicPolicy {
    /// `auto`: its settings, then what applies to every choice. Each choice keeps the
    /// original batch when it is not smaller.
    fn fmt_auto(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "auto ({}), recompress {}, only if smaller",
            self.auto,
            self.recompress.name()
        )?;
        if let Compression::Codec(fallback) = self.overload.compression {
            write!(f, ", under overload {}", fallback.name())?;
            if let Some(key) = crate::overload::level_key(fallback) {
                write!(f, " ({key}={})", self.overload.levels.get(key).unwrap_or(0))?;
            }
        }
        if let Some(share) = self.overload.max_cpu_share {
            write!(f, ", overload.max_cpu_share={share}")?;
        }
        Ok(())
    }

    /// Topic mode: the codec and level come from the topic, the rest from the policy.
    fn fmt_topic_mode(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("topic (the topic's own compression.type and level")?;
        let own: Vec<String> = kpress_codec::options::OPTION_KEYS
            .iter()
            .filter(|key| !key.ends_with(".level"))
            .filter(|key| {
                let default = CompressionOptions::default();
                self.options.get(key) != default.get(key)
            })
            .filter_map(|key| Some(format!("{key}={}", self.options.get(key)?)))
            .collect();
        if !own.is_empty() {
            write!(f, "; {}", own.join(", "))?;
        }
        if self.options.gzip_provider() != ProviderChoice::Default {
            write!(f, "; {GZIP_PROVIDER}={}", self.options.gzip_provider())?;
        }
        write!(f, "), recompress {}", self.recompress.name())?;
        if self.only_if_smaller {
            f.write_str(", only if smaller")?;
        }
        Ok(())
    }
}

/// One `[[topics]]` entry.
#[derive(Debug, Clone)]
pub struct TopicRule {
    pub pattern: TopicPattern,
    pub policy: TopicPolicy,
    /// Line of the rule's `match` key, for messages and summaries.
    pub line: usize,
}
