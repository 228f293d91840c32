//! The admin endpoint on `[admin] bind`: HTTP/1.1 serving `/metrics` (Prometheus text),
//! `/healthz` (the process serves), `/readyz` (listeners bound and a broker answered
//! recently) and `/policy` (the policy in force, as JSON). Bounded like every other
//! port kpress opens: headers have a size cap and a read deadline, a connection a
//! lifetime, and connections a count.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use kpress_codec::gzip_providers::ProviderStatus;
use kpress_config::{AdminSettings, ClientAuth, Config, NodeRouting, PasswordSource, TopicPolicy};
use kpress_proxy::{ProxySettings, ProxyStatus};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use serde_json::{json, Map, Value};
use tokio::net::TcpListener;
use tokio::sync::{watch, Mutex, Semaphore};
use tokio::task::JoinSet;

use crate::policy_reload::AppliedPolicy;

/// How often the gzip provider fallback counters are copied into the metrics.
const FALLBACK_REFRESH: Duration = Duration::from_secs(1);
/// How often histograms drain their samples (the exporter's own listener did this).
const METRICS_UPKEEP: Duration = Duration::from_secs(5);
/// A request's head (request line and headers) must arrive within this.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// hyper's read buffer, which bounds a request head; hyper's floor is 8 KiB.
const MAX_HEAD_BYTES: usize = 16 << 10;
const MAX_HEADERS: usize = 32;
/// A keep-alive connection is closed (after its response) once this old.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);
/// Admin connections open at once; more are closed as they are accepted.
const MAX_CONNECTIONS: usize = 64;
/// What a connection still gets to finish its response once the endpoint stops.
const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// A readiness probe of the brokers gives up after this.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// After a failed probe, `/readyz` answers from it this long instead of probing again,
/// so a flood of requests cannot become a flood of broker connections.
const PROBE_RETRY: Duration = Duration::from_secs(5);

/// Installs the Prometheus recorder (the metrics `/metrics` serves) with the gzip
/// provider gauges, and keeps the fallback counters and histograms current.
pub(crate) fn install_metrics(
    provider_statuses: &[ProviderStatus],
) -> anyhow::Result<PrometheusHandle> {
    let mut builder = PrometheusBuilder::new();
    for (name, buckets) in kpress_proxy::metrics::HISTOGRAM_BUCKETS {
        builder = builder
            .set_buckets_for_metric(Matcher::Full(name.to_owned()), buckets)
            .map_err(|err| anyhow::anyhow!("buckets of {name}: {err}"))?;
    }
    let handle = builder
        .install_recorder()
        .map_err(|err| anyhow::anyhow!("installing the metrics recorder: {err}"))?;
    kpress_proxy::metrics::gzip_provider_statuses(provider_statuses);
    tokio::spawn(async {
        let mut every = tokio::time::interval(FALLBACK_REFRESH);
        loop {
            every.tick().await;
            kpress_proxy::metrics::gzip_provider_fallbacks();
        }
    });
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(METRICS_UPKEEP);
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// What the endpoint answers from.
#[derive(Debug)]
pub(crate) struct Admin {
    metrics: PrometheusHandle,
    status: Arc<ProxyStatus>,
    policy: watch::Receiver<Arc<AppliedPolicy>>,
    readiness_window: Duration,
    /// For probing the brokers the way the proxy connects to them.
    proxy: ProxySettings,
    /// One probe at a time; the last failed one, answered from for [`PROBE_RETRY`].
    probe: Mutex<Option<(Instant, String)>>,
}

impl Admin {
    pub(crate) fn new(
        settings: &AdminSettings,
        metrics: PrometheusHandle,
        status: Arc<ProxyStatus>,
        policy: watch::Receiver<Arc<AppliedPolicy>>,
        proxy: ProxySettings,
    ) -> Admin {
        Admin {
            metrics,
            status,
            policy,
            readiness_window: settings.readiness_window,
            proxy,
            probe: Mutex::new(None),
        }
    }

    async fn respond(&self, method: &Method, path: &str) -> Response<Full<Bytes>> {
        match route(method, path) {
            Route::Metrics => text(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                self.metrics.render(),
            ),
            Route::Healthz => plain(StatusCode::OK, "ok\n"),
            Route::Readyz => match self.readiness().await {
                Ok(()) => plain(StatusCode::OK, "ready\n"),
                Err(reason) => plain(StatusCode::SERVICE_UNAVAILABLE, &format!("{reason}\n")),
            },
            Route::Policy => {
                let applied = Arc::clone(&self.policy.borrow());
                let mut body = serde_json::to_string_pretty(&policy_json(&applied))
                    .unwrap_or_else(|err| format!("{{\"error\": \"{err}\"}}"));
                body.push('\n');
                text(StatusCode::OK, "application/json", body)
            }
            Route::NotFound => plain(
                StatusCode::NOT_FOUND,
                "not found: kpress serves /metrics, /healthz, /readyz and /policy\n",
            ),
            Route::MethodNotAllowed => {
                let mut refusal = plain(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
                refusal
                    .headers_mut()
                    .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
                refusal
            }
        }
    }

    /// Ready, or the one-line reason why not. A proxy without client traffic has no
    /// recent broker answer of its own, so a stale one is refreshed by a probe.
    async fn readiness(&self) -> Result<(), String> {
        let check = || {
            readiness(
                self.status.listeners_bound(),
                self.status.since_upstream_answer(),
                self.readiness_window,
            )
        };
        match check() {
            Readiness::Stale => {}
            verdict => return verdict.into_result(self.readiness_window),
        }
        let mut last_failure = self.probe.lock().await;
        // Another request's probe may have answered while this one waited.
        match check() {
            Readiness::Stale => {}
            verdict => return verdict.into_result(self.readiness_window),
        }
        let stale = Readiness::Stale.into_result(self.readiness_window);
        if let Some((at, reason)) = last_failure.as_ref() {
            if at.elapsed() < PROBE_RETRY {
                return stale.map_err(|s| format!("{s} ({reason})"));
            }
        }
        let probed = tokio::time::timeout(
            PROBE_TIMEOUT,
            kpress_proxy::probe_upstream(&self.proxy, &self.status),
        )
        .await;
        let reason = match probed {
            Ok(Ok(_)) => {
                *last_failure = None;
                return Ok(());
            }
            Ok(Err(err)) => err.to_string(),
            Err(_) => format!("probe unanswered within {PROBE_TIMEOUT:?}"),
        };
        *last_failure = Some((Instant::now(), reason.clone()));
        stale.map_err(|s| format!("{s} ({reason})"))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Metrics,
    Healthz,
    Readyz,
    Policy,
    NotFound,
    /// A method other than GET or HEAD on one of the paths above.
    MethodNotAllowed,
}

fn route(method: &Method, path: &str) -> Route {
    let route = match path {
        "/metrics" => Route::Metrics,
        "/healthz" => Route::Healthz,
        "/readyz" => Route::Readyz,
        "/policy" => Route::Policy,
        _ => return Route::NotFound,
    };
    if method != Method::GET && method != Method::HEAD {
        return Route::MethodNotAllowed;
    }
    route
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Readiness {
    Ready,
    NotBound,
    /// No broker answer within the window.
    Stale,
}

impl Readiness {
    fn into_result(self, window: Duration) -> Result<(), String> {
        match self {
            Readiness::Ready => Ok(()),
            Readiness::NotBound => Err("listeners not bound".into()),
            Readiness::Stale => Err(format!(
                "no broker answered in the last {} s",
                window.as_secs()
            )),
        }
    }
}

fn readiness(listening: bool, since_answer: Option<Duration>, window: Duration) -> Readiness {
    if !listening {
        return Readiness::NotBound;
    }
    match since_answer {
        Some(since) if since <= window => Readiness::Ready,
        _ => Readiness::Stale,
    }
}

fn plain(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    text(status, "text/plain; charset=utf-8", body.to_owned())
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The policy in force as `/policy` shows it: everything the file decides, secrets
/// only by where they are read from.
fn policy_json(applied: &AppliedPolicy) -> Value {
    let config = &applied.config;
    json!({
        "file": applied.path.display().to_string(),
        "sha256": applied.file_hash,
        "loaded_at": rfc3339_utc(applied.loaded_at),
        "listener": listener_json(config),
        "upstream": upstream_json(config),
        "limits": limits_json(config),
        "admin": config.admin.as_ref().map(|admin| json!({
            "bind": admin.bind.to_string(),
            "readiness_window_secs": admin.readiness_window.as_secs(),
        })),
        "shadow": config.shadow.as_ref().map(|shadow| json!({
            "candidates": shadow.candidates.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
            "sample": shadow.sample,
            "max_cpu_fraction": shadow.max_cpu_fraction,
            "threads": shadow.threads,
            "max_queue_bytes": shadow.max_queue_bytes,
        })),
        "defaults": rule_json(&config.defaults),
        "topics": config.topics.iter().map(|rule| {
            let mut entry = Map::new();
            entry.insert("match".into(), rule.pattern.to_string().into());
            entry.insert("line".into(), rule.line.into());
            if let Value::Object(policy) = rule_json(&rule.policy) {
                entry.extend(policy);
            }
            Value::Object(entry)
        }).collect::<Vec<_>>(),
    })
}

fn listener_json(config: &Config) -> Value {
    let listener = &config.listener;
    let mut out = Map::new();
    out.insert("bind".into(), listener.bind.to_string().into());
    match &listener.routing {
        NodeRouting::Ports {
            advertised_host,
            node_port_base,
        } => {
            out.insert("mode".into(), "ports".into());
            out.insert("advertised_host".into(), advertised_host.clone().into());
            out.insert("node_port_base".into(), (*node_port_base).into());
        }
        NodeRouting::Sni {
            advertised_host_pattern,
            bootstrap_host,
            advertised_port,
        } => {
            out.insert("mode".into(), "sni".into());
            out.insert(
                "advertised_host_pattern".into(),
                advertised_host_pattern.to_string().into(),
            );
            out.insert("bootstrap_host".into(), bootstrap_host.clone().into());
            out.insert("advertised_port".into(), (*advertised_port).into());
        }
    }
    out.insert(
        "tls".into(),
        listener.tls.as_ref().map_or(Value::Null, |tls| {
            json!({
                "cert": tls.cert.display().to_string(),
                "key": tls.key.display().to_string(),
                "client_ca": tls.client_ca.as_ref().map(|p| p.display().to_string()),
                "client_auth": match tls.client_auth {
                    ClientAuth::None => None,
                    auth => Some(auth.name()),
                },
                "min_version": tls.min_version.name(),
            })
        }),
    );
    out.insert(
        "rewrite_before_auth".into(),
        listener.rewrite_before_auth.into(),
    );
    out.insert("reuse_port".into(), listener.reuse_port.into());
    Value::Object(out)
}

fn upstream_json(config: &Config) -> Value {
    let upstream = &config.upstream;
    json!({
        "bootstrap_servers": upstream.bootstrap_servers,
        "tls": upstream.tls.as_ref().map(|tls| json!({
            "ca": tls.ca.as_ref().map(|p| p.display().to_string()),
            "cert": tls.client_cert.as_ref().map(|(cert, _)| cert.display().to_string()),
            "key": tls.client_cert.as_ref().map(|(_, key)| key.display().to_string()),
            "server_name": tls.server_name,
            "verify": tls.verify,
        })),
        "sasl": upstream.sasl.as_ref().map(|sasl| {
            let mut out = Map::new();
            out.insert("mechanism".into(), sasl.mechanism.name().into());
            out.insert("username".into(), sasl.username.clone().into());
            match &sasl.password {
                PasswordSource::File(path) => {
                    out.insert("password_file".into(), path.display().to_string().into())
                }
                PasswordSource::Env(name) => out.insert("password_env".into(), name.clone().into()),
            };
            Value::Object(out)
        }),
    })
}

fn limits_json(config: &Config) -> Value {
    let limits = &config.limits;
    json!({
        "max_batch_bytes": limits.max_batch_bytes,
        "max_decompressed_bytes": limits.max_decompressed_bytes,
        "max_frame_bytes": limits.max_frame_bytes,
        "max_inflight_bytes": limits.max_inflight_bytes,
        "max_connection_inflight_bytes": limits.max_connection_inflight_bytes,
        "max_connections": limits.max_connections,
        "frame_timeout_ms": limits.frame_timeout_ms,
        "idle_timeout_ms": limits.idle_timeout_ms,
        "max_request_decompressed_bytes": limits.max_request_decompressed_bytes,
        "max_decompression_ratio": limits.max_decompression_ratio,
        "max_topic_labels": limits.max_topic_labels,
    })
}

/// One rule's policy under the policy file's own keys: `compression.type`, the
/// target codec's `compression.*` options (and the gzip provider wherever it reads
/// gzip input), `recompress` and `only_if_smaller`.
fn rule_json(policy: &TopicPolicy) -> Value {
    use kpress_codec::gzip_providers::ProviderChoice;
    use kpress_codec::options::{GZIP_PROVIDER, OPTION_KEYS};
    use kpress_config::Compression;

    let mut options = Map::new();
    let mut gzip = false;
    if let Compression::Codec(codec) = policy.compression {
        gzip = codec == kpress_codec::Codec::Gzip;
        let prefix = format!("compression.{}.", codec.name());
        for key in OPTION_KEYS.iter().filter(|key| key.starts_with(&prefix)) {
            if let Some(value) = policy.options.get(key) {
                options.insert((*key).into(), value.into());
            }
        }
    }
    if gzip || policy.options.gzip_provider() != ProviderChoice::Default {
        options.insert(
            GZIP_PROVIDER.into(),
            policy.options.gzip_provider().name().into(),
        );
    }
    json!({
        "compression.type": policy.compression.name(),
        "options": options,
        "recompress": policy.recompress.name(),
        "only_if_smaller": policy.only_if_smaller,
    })
}

/// `2026-01-31T12:34:56.789Z`.
fn rfc3339_utc(at: SystemTime) -> String {
    let since_epoch = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since_epoch.as_secs();
    let (days, of_day) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60,
        since_epoch.subsec_millis()
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for days on or after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// The running endpoint; [`AdminServer::stop`] ends it.
#[derive(Debug)]
pub(crate) struct AdminServer {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl AdminServer {
    /// Binds `bind` and serves `admin` there until stopped.
    pub(crate) async fn start(bind: SocketAddr, admin: Admin) -> std::io::Result<AdminServer> {
        let listener = TcpListener::bind(bind).await?;
        let (stop, stopping) = watch::channel(false);
        let task = tokio::spawn(serve(listener, Arc::new(admin), stopping));
        Ok(AdminServer { stop, task })
    }

    /// Stops accepting, lets open connections finish their responses (up to
    /// [`CLOSE_GRACE`]), and closes them.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

async fn serve(listener: TcpListener, admin: Arc<Admin>, mut stopping: watch::Receiver<bool>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = stopping.changed() => break,
            accepted = listener.accept() => accepted,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                // Out of file descriptors and the like: pause rather than spin.
                tracing::warn!(error = %err, "admin endpoint: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::debug!(%peer, "admin endpoint: too many connections, closing");
            continue;
        };
        let admin = Arc::clone(&admin);
        let stopping = stopping.clone();
        connections.spawn(async move {
            let _slot = slot;
            serve_connection(stream, admin, stopping).await;
        });
    }
    let drained = tokio::time::timeout(CLOSE_GRACE + Duration::from_secs(1), async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        connections.abort_all();
    }
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    admin: Arc<Admin>,
    mut stopping: watch::Receiver<bool>,
) {
    let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
        let admin = Arc::clone(&admin);
        async move { Ok::<_, Infallible>(admin.respond(request.method(), request.uri().path()).await) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        _ = tokio::time::sleep(CONNECTION_LIFETIME) => {}
        _ = stopping.wait_for(|stop| *stop) => {}
    }
    connection.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(CLOSE_GRACE, connection).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> Config {
        crate::test_policy::with(extra)
    }

    fn applied(config: Config) -> AppliedPolicy {
        AppliedPolicy {
            path: "/etc/kpress/k.toml".into(),
            config,
            file_hash: "ab".repeat(32),
            loaded_at: SystemTime::UNIX_EPOCH + Duration::from_millis(1_767_225_600_123),
        }
    }

    #[test]
    fn paths_and_methods_are_routed() {
        assert_eq!(route(&Method::GET, "/metrics"), Route::Metrics);
        assert_eq!(route(&Method::HEAD, "/healthz"), Route::Healthz);
        assert_eq!(route(&Method::GET, "/readyz"), Route::Readyz);
        assert_eq!(route(&Method::GET, "/policy"), Route::Policy);
        for path in ["/", "/metrics/", "/policy.json", "/healthz/x", ""] {
            assert_eq!(route(&Method::GET, path), Route::NotFound, "{path}");
        }
        assert_eq!(route(&Method::POST, "/policy"), Route::MethodNotAllowed);
        assert_eq!(route(&Method::DELETE, "/nope"), Route::NotFound);
    }

    #[test]
    fn ready_needs_listeners_and_a_recent_broker_answer() {
        let window = Duration::from_secs(30);
        let recent = Some(Duration::from_secs(3));
        assert_eq!(readiness(true, recent, window), Readiness::Ready);
        assert_eq!(
            readiness(true, Some(window), window),
            Readiness::Ready,
            "the window's edge is inside it"
        );
        assert_eq!(readiness(false, recent, window), Readiness::NotBound);
        assert_eq!(readiness(true, None, window), Readiness::Stale);
        assert_eq!(
            readiness(true, Some(Duration::from_secs(31)), window),
            Readiness::Stale
        );
        assert_eq!(
            Readiness::Stale.into_result(window).unwrap_err(),
            "no broker answered in the last 30 s"
        );
        assert_eq!(
            Readiness::NotBound.into_result(window).unwrap_err(),
            "listeners not bound"
        );
    }

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(
            rfc3339_utc(SystemTime::UNIX_EPOCH),
            "1970-01-01T00:00:00.000Z"
        );
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_767_225_600_123);
        assert_eq!(rfc3339_utc(at), "2026-01-01T00:00:00.123Z");
        // A leap day, and the last second of a day.
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(951_868_799);
        assert_eq!(rfc3339_utc(at), "2000-02-29T23:59:59.000Z");
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(4_107_542_400);
        assert_eq!(rfc3339_utc(at), "2100-03-01T00:00:00.000Z");
    }

    #[test]
    fn the_policy_shows_rules_in_kafka_names_and_no_secrets() {
        let config = config(
            "[upstream.sasl]\nmechanism = \"SCRAM-SHA-512\"\nusername = \"kpress\"\n\
             password_env = \"KPRESS_PW\"\n\
             [limits]\nmax_connections = 7\n\
             [admin]\nbind = \"127.0.0.1:9464\"\nreadiness_window_secs = 12\n\
             [shadow]\ncandidates = [\"zstd\", \"lz4:9\"]\nsample = 0.5\n\
             [defaults]\ncompression.type = \"lz4\"\n\
             [[topics]]\nmatch = \"logs.*\"\ncompression.type = \"zstd\"\n\
             compression.zstd.level = 7\nonly_if_smaller = true\n\
             [[topics]]\nmatch = \"re:^a.+\"\ncompression.type = \"gzip\"\n\
             compression.gzip.provider = \"zlib\"\nrecompress = \"always\"\n\
             [[topics]]\nmatch = \"raw\"\ncompression.type = \"producer\"\n",
        );
        let json = policy_json(&applied(config));
        assert_eq!(json["file"], "/etc/kpress/k.toml");
        assert_eq!(json["sha256"], "ab".repeat(32));
        assert_eq!(json["loaded_at"], "2026-01-01T00:00:00.123Z");
        assert_eq!(json["listener"]["bind"], "127.0.0.1:19092");
        assert_eq!(json["listener"]["mode"], "ports");
        assert_eq!(json["listener"]["node_port_base"], 19100);
        assert_eq!(json["listener"]["tls"], Value::Null);
        assert_eq!(json["upstream"]["bootstrap_servers"][0], "127.0.0.1:9092");
        let sasl = &json["upstream"]["sasl"];
        assert_eq!(sasl["mechanism"], "SCRAM-SHA-512");
        assert_eq!(sasl["password_env"], "KPRESS_PW");
        assert!(sasl.get("password").is_none());
        assert_eq!(json["limits"]["max_connections"], 7);
        assert_eq!(json["admin"]["bind"], "127.0.0.1:9464");
        assert_eq!(json["admin"]["readiness_window_secs"], 12);
        assert_eq!(json["shadow"]["candidates"], json!(["zstd:3", "lz4:9"]));
        assert_eq!(json["shadow"]["sample"], 0.5);
        assert_eq!(json["shadow"]["threads"], 1);
        let defaults = &json["defaults"];
        assert_eq!(defaults["compression.type"], "lz4");
        assert_eq!(defaults["options"]["compression.lz4.level"], 9);
        assert_eq!(defaults["recompress"], "codec-differs");
        assert_eq!(defaults["only_if_smaller"], false);
        let topics = json["topics"].as_array().unwrap();
        assert_eq!(topics.len(), 3);
        assert_eq!(topics[0]["match"], "logs.*");
        assert_eq!(topics[0]["compression.type"], "zstd");
        assert_eq!(
            topics[0]["options"],
            json!({"compression.zstd.level": 7, "compression.zstd.window": 0})
        );
        assert_eq!(topics[0]["only_if_smaller"], true);
        assert_eq!(topics[1]["match"], "re:^a.+");
        assert_eq!(topics[1]["recompress"], "always");
        assert_eq!(topics[1]["options"]["compression.gzip.provider"], "zlib");
        assert!(topics[1]["options"]["compression.gzip.level"].is_i64());
        assert_eq!(topics[2]["compression.type"], "producer");
        assert_eq!(topics[2]["options"], json!({}));
    }

    #[test]
    fn sni_listeners_and_upstream_tls_are_summarized() {
        let mut config = config("");
        config.listener.routing = NodeRouting::Sni {
            advertised_host_pattern: kpress_config::HostPattern::new("b-{node}.kafka.test")
                .unwrap(),
            bootstrap_host: Some("kafka.test".into()),
            advertised_port: 9093,
        };
        config.upstream.tls = Some(kpress_config::UpstreamTls {
            ca: Some("/pki/ca.pem".into()),
            client_cert: Some(("/pki/k.pem".into(), "/pki/k.key".into())),
            server_name: None,
            verify: true,
        });
        let json = policy_json(&applied(config));
        assert_eq!(json["listener"]["mode"], "sni");
        assert_eq!(
            json["listener"]["advertised_host_pattern"],
            "b-{node}.kafka.test"
        );
        assert_eq!(json["listener"]["advertised_port"], 9093);
        assert_eq!(json["upstream"]["tls"]["cert"], "/pki/k.pem");
        assert_eq!(json["upstream"]["tls"]["verify"], true);
        assert_eq!(json["admin"], Value::Null);
    }

    fn admin(policy: AppliedPolicy) -> Admin {
        let recorder = PrometheusBuilder::new().build_recorder();
        let config = policy.config.clone();
        let (_, policy) = watch::channel(Arc::new(policy));
        Admin::new(
            &AdminSettings {
                bind: "127.0.0.1:0".parse().unwrap(),
                readiness_window: Duration::from_secs(30),
            },
            recorder.handle(),
            Arc::new(ProxyStatus::default()),
            policy,
            crate::run::proxy_settings(&config, Duration::from_secs(1)).unwrap(),
        )
    }

    async fn body(response: Response<Full<Bytes>>) -> String {
        use http_body_util::BodyExt;
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn each_endpoint_answers() {
        let admin = admin(applied(config("")));
        let health = admin.respond(&Method::GET, "/healthz").await;
        assert_eq!(health.status(), StatusCode::OK);
        assert_eq!(body(health).await, "ok\n");
        // The proxy has not bound its listeners: not ready, and no broker is asked.
        let ready = admin.respond(&Method::GET, "/readyz").await;
        assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body(ready).await, "listeners not bound\n");
        let metrics = admin.respond(&Method::GET, "/metrics").await;
        assert_eq!(metrics.status(), StatusCode::OK);
        assert!(metrics.headers()[CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4"));
        let policy = admin.respond(&Method::GET, "/policy").await;
        assert_eq!(policy.headers()[CONTENT_TYPE], "application/json");
        let json: Value = serde_json::from_str(&body(policy).await).unwrap();
        assert_eq!(json["sha256"], "ab".repeat(32));
        let missing = admin.respond(&Method::GET, "/admin").await;
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
        let refused = admin.respond(&Method::PUT, "/policy").await;
        assert_eq!(refused.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(refused.headers()[ALLOW], "GET, HEAD");
    }
}
