//! The admin endpoint on `[admin] bind`: HTTP/1.1 serving `/metrics` (Prometheus text),
//! `/healthz` (the process serves), `/readyz` (listeners bound and a broker answered
//! recently) and `/policy` (the policy in force, as JSON). Bounded like every other
//! port kpress opens: headers have a size cap and a read deadline, a connection a
//! lifetime, and connections a count. This module is the HTTP server; `policy` builds
//! the `/policy` document.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use kpress_codec::gzip_providers::ProviderStatus;
use kpress_config::AdminSettings;
use kpress_proxy::{ProxySettings, ProxyStatus};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio::sync::{watch, Mutex, Semaphore};
use tokio::task::JoinSet;

use crate::policy_reload::AppliedPolicy;

mod policy;

use policy::policy_json;

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
    use super::policy::tests::{applied, config};
    use super::*;
    use serde_json::Value;

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
