//! The admin endpoint on `[admin] bind`: HTTP/1.1 serving `/metrics` (Prometheus text),
//! `/healthz` (the process serves), `/readyz` (listeners bound and a broker answered
//! recently) and `/policy` (the policy in force, as JSON). Bounded like every other
//! port kpress opens: headers have a size cap and a read deadline, a connection a
//! lifetime, and connections a count. With `[listener] reuse_port`, a process finding
//! the port held (the kpress a restart replaces) waits for it ([`PortWait`]), and a
//! stopping one closes it as shutdown begins. This module is the HTTP server; `policy`
//! builds the `/policy` document.

use std::convert::Infallible;
use std::io;
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
use kpress_proxy::descriptors::AcceptFailures;
use kpress_proxy::{ProxyStatus, TopicConfigCache, UpstreamSettings};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio::sync::{watch, Mutex, Semaphore};
use tokio::task::JoinSet;

use crate::policy_reload::AppliedPolicy;

mod consumers;
mod policy;

use consumers::consumers_json;
use policy::{learned_topics_json, policy_json};

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
    upstream: UpstreamSettings,
    /// The topics the proxy learned, for `/policy`.
    topic_configs: Arc<TopicConfigCache>,
    /// One probe at a time; the last failed one, answered from for [`PROBE_RETRY`].
    probe: Mutex<Option<(Instant, String)>>,
}

impl Admin {
    pub(crate) fn new(
        settings: &AdminSettings,
        metrics: PrometheusHandle,
        status: Arc<ProxyStatus>,
        policy: watch::Receiver<Arc<AppliedPolicy>>,
        upstream: UpstreamSettings,
        topic_configs: Arc<TopicConfigCache>,
    ) -> Admin {
        Admin {
            metrics,
            status,
            policy,
            readiness_window: settings.readiness_window,
            upstream,
            topic_configs,
            probe: Mutex::new(None),
        }
    }

    async fn respond(&self, method: &Method, path: &str) -> Response<Full<Bytes>> {
        match route(method, path) {
            Route::Metrics => text(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                kpress_proxy::metrics::served_types(self.metrics.render()),
            ),
            Route::Healthz => plain(StatusCode::OK, "ok\n"),
            Route::Readyz => match self.readiness().await {
                Ok(()) => plain(StatusCode::OK, "ready\n"),
                Err(reason) => plain(StatusCode::SERVICE_UNAVAILABLE, &format!("{reason}\n")),
            },
            Route::Policy => {
                let applied = Arc::clone(&self.policy.borrow());
                let mut json = policy_json(&applied);
                let cache = &self.topic_configs;
                json["learned_topics"] =
                    learned_topics_json(&applied.config, &cache.learned(), Arc::clone(cache) as _);
                let mut body = serde_json::to_string_pretty(&json)
                    .unwrap_or_else(|err| format!("{{\"error\": \"{err}\"}}"));
                body.push('\n');
                text(StatusCode::OK, "application/json", body)
            }
            Route::Consumers => {
                let seen = kpress_proxy::SeenConsumers::global().snapshot();
                let mut body = serde_json::to_string_pretty(&consumers_json(&seen))
                    .unwrap_or_else(|err| format!("{{\"error\": \"{err}\"}}"));
                body.push('\n');
                text(StatusCode::OK, "application/json", body)
            }
            Route::NotFound => plain(
                StatusCode::NOT_FOUND,
                "not found: kpress serves /metrics, /healthz, /readyz, /policy and /consumers\n",
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
            kpress_proxy::probe_upstream(&self.upstream, &self.status),
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
    Consumers,
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
        "/consumers" => Route::Consumers,
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

/// How a process whose `[admin] bind` is held by another waits for it. One port has one
/// holder: a port shared through `SO_REUSEPORT` would hand each scrape to either
/// process, so Prometheus would see two processes' counters alternate (resets and
/// jumps), and `/readyz` would answer for a process picked by the kernel. With
/// `[listener] reuse_port`, the process being replaced keeps the port until its
/// SIGTERM, then hands it to the new one, which polls for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PortWait {
    /// Between bind attempts: the most the port goes unanswered once its holder lets go.
    pub(crate) every: Duration,
    /// Past this the holder is taken for something other than a kpress being replaced,
    /// and kpress stops, naming the port.
    pub(crate) up_to: Duration,
}

impl PortWait {
    /// A restart's new process and the old one overlap for as long as the operator
    /// takes to send the old one SIGTERM.
    pub(crate) const RESTART: PortWait = PortWait {
        every: Duration::from_millis(50),
        up_to: Duration::from_secs(120),
    };
}

/// The running endpoint; [`AdminServer::stop`] ends it.
#[derive(Debug)]
pub(crate) struct AdminServer {
    bind: SocketAddr,
    stop: watch::Sender<bool>,
    /// Turns true if waiting for the port failed: still in use after
    /// [`PortWait::up_to`], or another bind error.
    gave_up: watch::Receiver<bool>,
    task: tokio::task::JoinHandle<io::Result<()>>,
}

impl AdminServer {
    /// Binds `bind` and serves `admin` there until stopped. A port in use fails at once
    /// without `wait`; with it, the endpoint is served once the port comes free (see
    /// [`AdminServer::gave_up`]), while the caller goes on. Other bind errors fail at
    /// once.
    pub(crate) async fn start(
        bind: SocketAddr,
        admin: Admin,
        wait: Option<PortWait>,
    ) -> io::Result<AdminServer> {
        let port = match (TcpListener::bind(bind).await, wait) {
            (Ok(listener), _) => {
                tracing::info!("admin endpoint on http://{bind}: {ENDPOINTS}");
                Ok(listener)
            }
            (Err(err), Some(wait)) if err.kind() == io::ErrorKind::AddrInUse => {
                tracing::info!(
                    "admin endpoint: {bind} is in use (by the kpress this one replaces?): \
                     serving without it until it comes free, for {} s at most",
                    wait.up_to.as_secs()
                );
                Err(wait)
            }
            (Err(err), _) => return Err(err),
        };
        let (stop, stopping) = watch::channel(false);
        let (gave_up_tx, gave_up) = watch::channel(false);
        let admin = Arc::new(admin);
        let task = tokio::spawn(async move {
            let listener = match port {
                Ok(listener) => listener,
                Err(wait) => match take_when_free(bind, wait, stopping.clone()).await {
                    Ok(Some((listener, waited))) => {
                        tracing::info!(
                            "admin endpoint on http://{bind} after {:.1} s waiting for it: \
                             {ENDPOINTS}",
                            waited.as_secs_f64()
                        );
                        listener
                    }
                    Ok(None) => {
                        tracing::info!("admin endpoint: stopped waiting for {bind}: shutting down");
                        return Ok(());
                    }
                    Err(err) => {
                        tracing::error!("admin endpoint: cannot bind {bind}: {err}; stopping");
                        gave_up_tx.send_replace(true);
                        return Err(err);
                    }
                },
            };
            serve(listener, admin, stopping).await;
            Ok(())
        });
        Ok(AdminServer {
            bind,
            stop,
            gave_up,
            task,
        })
    }

    /// Completes if the endpoint stopped waiting for its port without getting it;
    /// [`AdminServer::stop`] then returns why. Pending otherwise.
    pub(crate) async fn gave_up(&self) {
        let mut gave_up = self.gave_up.clone();
        if gave_up.wait_for(|gave_up| *gave_up).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Stops accepting and closes the port at once (or stops waiting for it); open
    /// connections finish their responses (up to [`CLOSE_GRACE`]) in the background.
    pub(crate) fn close_port(&self) {
        if !self.stop.send_replace(true) {
            tracing::debug!("admin endpoint: {} closed", self.bind);
        }
    }

    /// Closes the port if still open and waits until open connections are done. An
    /// error if the port was never bound: waited for too long, or another bind error.
    pub(crate) async fn stop(self) -> io::Result<()> {
        self.close_port();
        match self.task.await {
            Ok(outcome) => outcome,
            Err(err) => Err(io::Error::other(format!("admin endpoint task: {err}"))),
        }
    }
}

const ENDPOINTS: &str = "/metrics /healthz /readyz /policy /consumers";

/// Binds `bind` once it is free, trying every `wait.every`: the listener and how long
/// it took, or `None` if told to stop first. A bind error other than "in use", or the
/// port still in use after `wait.up_to`, is an error.
async fn take_when_free(
    bind: SocketAddr,
    wait: PortWait,
    mut stopping: watch::Receiver<bool>,
) -> io::Result<Option<(TcpListener, Duration)>> {
    let started = Instant::now();
    loop {
        tokio::select! {
            _ = stopping.wait_for(|stop| *stop) => return Ok(None),
            () = tokio::time::sleep(wait.every) => {}
        }
        match TcpListener::bind(bind).await {
            Ok(listener) => return Ok(Some((listener, started.elapsed()))),
            Err(err) if err.kind() == io::ErrorKind::AddrInUse => {
                if started.elapsed() >= wait.up_to {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!(
                            "still in use after {} s of waiting: stop what holds it (for a \
                             restart, SIGTERM the kpress this one replaces), or give each \
                             kpress that runs beside another its own [admin] bind",
                            wait.up_to.as_secs()
                        ),
                    ));
                }
            }
            Err(err) => return Err(err),
        }
    }
}

async fn serve(listener: TcpListener, admin: Arc<Admin>, mut stopping: watch::Receiver<bool>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = JoinSet::new();
    let mut failures = AcceptFailures::default();
    loop {
        let accepted = tokio::select! {
            _ = stopping.wait_for(|stop| *stop) => break,
            accepted = listener.accept() => accepted,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => {
                failures.succeeded();
                accepted
            }
            Err(err) => {
                // Out of file descriptors and the like: pause rather than spin.
                tokio::time::sleep(failures.failed(&listener, "admin", &err)).await;
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
    // The port closes now, not once the connections are done: a process waiting for
    // it (a restart's new kpress) takes it over while these finish.
    drop(listener);
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
        assert_eq!(route(&Method::GET, "/consumers"), Route::Consumers);
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
            kpress_proxy::ProxySettings::from_config(&config, None, Duration::from_secs(1))
                .upstream,
            Arc::new(TopicConfigCache::new(config.upstream.topic_config_refresh)),
        )
    }

    async fn body(response: Response<Full<Bytes>>) -> String {
        use http_body_util::BodyExt;
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    /// A port held by a plain listener of this process, as another process would.
    fn held_port() -> (std::net::TcpListener, SocketAddr) {
        let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = holder.local_addr().unwrap();
        (holder, addr)
    }

    const QUICK: PortWait = PortWait {
        every: Duration::from_millis(10),
        up_to: Duration::from_secs(20),
    };

    /// `GET path` over HTTP/1.0: status line and body.
    async fn get(addr: SocketAddr, path: &str) -> io::Result<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
            .await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        Ok(response)
    }

    #[tokio::test]
    async fn a_port_in_use_is_taken_once_its_holder_lets_go() {
        let (holder, addr) = held_port();
        let (_stop, stopping) = watch::channel(false);
        let waiting = tokio::spawn(take_when_free(addr, QUICK, stopping));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "bound while the port was held");
        drop(holder);
        let (listener, waited) = waiting.await.unwrap().unwrap().expect("not stopped");
        assert_eq!(listener.local_addr().unwrap(), addr);
        assert!(waited >= Duration::from_millis(300), "{waited:?}");
        assert!(waited < QUICK.up_to, "{waited:?}");
    }

    #[tokio::test]
    async fn a_port_still_in_use_after_the_wait_is_an_error_naming_the_wait() {
        let (_holder, addr) = held_port();
        let (_stop, stopping) = watch::channel(false);
        let wait = PortWait {
            every: Duration::from_millis(10),
            up_to: Duration::from_millis(200),
        };
        let started = Instant::now();
        let err = take_when_free(addr, wait, stopping).await.unwrap_err();
        assert!(started.elapsed() >= wait.up_to);
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        assert!(
            err.to_string()
                .starts_with("still in use after 0 s of waiting")
                && err.to_string().contains("its own [admin] bind"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_stop_ends_the_wait() {
        let (_holder, addr) = held_port();
        let (stop, stopping) = watch::channel(false);
        let waiting = tokio::spawn(take_when_free(addr, QUICK, stopping));
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop.send_replace(true);
        let outcome = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("still waiting after the stop")
            .unwrap();
        assert!(matches!(outcome, Ok(None)), "{outcome:?}");
    }

    #[tokio::test]
    async fn a_port_in_use_fails_at_once_without_a_wait_and_other_errors_always() {
        let (_holder, addr) = held_port();
        let err = AdminServer::start(addr, admin(applied(config(""))), None)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        // 192.0.2.1 (TEST-NET-1) is no address of this host: not retried.
        let elsewhere: SocketAddr = "192.0.2.1:9464".parse().unwrap();
        let err = AdminServer::start(elsewhere, admin(applied(config(""))), Some(QUICK))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrNotAvailable, "{err}");
    }

    #[tokio::test]
    async fn the_endpoint_serves_once_the_port_comes_free_and_hands_it_on_when_closed() {
        let (holder, addr) = held_port();
        let first = AdminServer::start(addr, admin(applied(config(""))), Some(QUICK))
            .await
            .expect("a port in use is waited for");
        drop(holder);
        let deadline = Instant::now() + Duration::from_secs(10);
        let answer = loop {
            match get(addr, "/healthz").await {
                Ok(answer) => break answer,
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(err) => panic!("the endpoint did not take {addr}: {err}"),
            }
        };
        assert!(
            answer.starts_with("HTTP/1.0 200") && answer.ends_with("ok\n"),
            "{answer}"
        );

        // A request half sent keeps its connection draining for a while after the
        // port closes; the next process waiting for the port takes it meanwhile.
        let mut unfinished = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut unfinished, b"GET /healthz HTTP/1.1\r\n")
            .await
            .unwrap();
        let next = AdminServer::start(addr, admin(applied(config(""))), Some(QUICK))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        first.close_port();
        let draining = tokio::spawn(first.stop());
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            // A connection queued on a listener that no longer accepts would hang.
            match tokio::time::timeout(Duration::from_millis(500), get(addr, "/healthz")).await {
                Ok(Ok(answer)) => {
                    assert!(answer.ends_with("ok\n"), "{answer}");
                    break;
                }
                _ if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                other => panic!("the port was not handed on within 1 s: {other:?}"),
            }
        }
        assert!(
            !draining.is_finished(),
            "the first endpoint finished draining before the port was handed on"
        );
        draining.await.unwrap().unwrap();
        drop(unfinished);
        next.stop().await.unwrap();
    }

    #[tokio::test]
    async fn giving_up_on_the_port_is_reported_and_stop_returns_why() {
        let (_holder, addr) = held_port();
        let wait = PortWait {
            every: Duration::from_millis(10),
            up_to: Duration::from_millis(100),
        };
        let server = AdminServer::start(addr, admin(applied(config(""))), Some(wait))
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), server.gave_up())
            .await
            .expect("gave_up did not complete");
        let err = server.stop().await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
    }

    #[tokio::test]
    async fn a_stop_while_waiting_is_no_error_and_gave_up_stays_pending() {
        let (_holder, addr) = held_port();
        let server = AdminServer::start(addr, admin(applied(config(""))), Some(QUICK))
            .await
            .unwrap();
        server.close_port();
        let pending = tokio::time::timeout(Duration::from_millis(200), server.gave_up()).await;
        assert!(pending.is_err(), "gave_up completed after a stop");
        server.stop().await.unwrap();
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
