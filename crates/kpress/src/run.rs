//! `kpress run --config FILE`: the proxy, with the policy file's rules, its metrics
//! endpoint, and a graceful stop on Ctrl-C or SIGTERM.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kpress_batch::PolicyLookup;
use kpress_config::{Config, ConfigError, NodeRouting, PolicySet};
use kpress_proxy::{ProxyError, ProxySettings};

use crate::{check_config, gzip_providers};

/// How often the gzip provider fallback counters are copied into the metrics.
const FALLBACK_REFRESH: Duration = Duration::from_secs(1);

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The policy file (see config/kpress.toml); an invalid file stops kpress at once.
    #[arg(long, short = 'c', value_name = "FILE")]
    config: PathBuf,
    /// Seconds in-flight requests get to finish after Ctrl-C or SIGTERM.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    shutdown_grace: u64,
    /// Tokio worker threads (default: one per CPU).
    #[arg(long, value_name = "N")]
    worker_threads: Option<usize>,
}

pub(crate) fn main(args: Args) -> anyhow::Result<ExitCode> {
    let config = match check_config::load_reporting(&args.config) {
        Ok(config) => config,
        Err(err) => {
            let file = args.config.display();
            match err {
                ConfigError::Read { .. } => eprintln!(
                    "kpress: not starting: --config needs a policy file kpress can read \
                     (config/kpress.toml is an example)"
                ),
                ConfigError::Invalid(_) => eprintln!(
                    "kpress: not starting: fix {file} (check it with `kpress check-config {file}`)"
                ),
            }
            return Ok(ExitCode::FAILURE);
        }
    };
    let provider_statuses = gzip_providers::statuses();
    gzip_providers::log(&provider_statuses);
    let settings = proxy_settings(&config, Duration::from_secs(args.shutdown_grace));
    let policies: Arc<dyn PolicyLookup> = Arc::new(PolicySet::new(&config));

    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all().thread_name("kpress");
    if let Some(n) = args.worker_threads {
        runtime.worker_threads(n.max(1));
    }
    let runtime = runtime.build().context("starting the tokio runtime")?;
    runtime.block_on(async {
        if let Some(metrics) = &config.metrics {
            metrics_exporter_prometheus::PrometheusBuilder::new()
                .with_http_listener(metrics.bind)
                .install()
                .with_context(|| {
                    format!(
                        "starting the metrics endpoint on {} ([metrics] bind in {})",
                        metrics.bind,
                        args.config.display()
                    )
                })?;
            tracing::info!("metrics on http://{}/metrics", metrics.bind);
            kpress_proxy::metrics::gzip_provider_statuses(&provider_statuses);
            tokio::spawn(async {
                let mut every = tokio::time::interval(FALLBACK_REFRESH);
                loop {
                    every.tick().await;
                    kpress_proxy::metrics::gzip_provider_fallbacks();
                }
            });
        }
        tracing::info!(
            "policy {}:\n{}",
            args.config.display(),
            check_config::summary(&config).trim_end()
        );
        kpress_proxy::run(settings, policies, shutdown_signal())
            .await
            .map_err(|err| {
                let next = what_to_do(&err, &config, &args.config);
                anyhow::anyhow!("{err}\n  {next}").context("proxy stopped")
            })
    })?;
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

fn proxy_settings(config: &Config, shutdown_grace: Duration) -> ProxySettings {
    // lead: listener.tls, listener.rewrite_before_auth, upstream.tls and upstream.sasl are
    // not mapped (ProxySettings has no fields for them yet), so kpress still runs them as
    // plaintext. sni mode has no ProxySettings either: these stand-ins only keep the binary
    // building and are not sni mode.
    let (advertised_host, node_port_base) = match &config.listener.routing {
        NodeRouting::Ports {
            advertised_host,
            node_port_base,
        } => (advertised_host.clone(), *node_port_base),
        NodeRouting::Sni {
            advertised_host_pattern,
            advertised_port,
            ..
        } => (advertised_host_pattern.to_string(), *advertised_port),
    };
    ProxySettings {
        bind: config.listener.bind,
        advertised_host,
        node_port_base,
        bootstrap_servers: config.upstream.bootstrap_servers.clone(),
        max_frame_bytes: config.limits.max_frame_bytes,
        max_inflight_bytes: config.limits.max_inflight_bytes,
        max_connection_inflight_bytes: config.limits.max_connection_inflight_bytes,
        max_connections: config.limits.max_connections,
        frame_timeout: Duration::from_millis(config.limits.frame_timeout_ms as u64),
        idle_timeout: Duration::from_millis(config.limits.idle_timeout_ms as u64),
        max_request_decompressed_bytes: config.limits.max_request_decompressed_bytes,
        max_topic_labels: config.limits.max_topic_labels,
        shutdown_grace,
    }
}

/// What an operator does about a proxy that could not start, naming the policy
/// file's key that decides it.
fn what_to_do(err: &ProxyError, config: &Config, path: &Path) -> String {
    let file = path.display();
    match err {
        ProxyError::Bind {
            listener,
            addr,
            source,
        } if source.kind() == io::ErrorKind::AddrInUse && listener != "bootstrap" => {
            // kpress itself may hold the port: its bootstrap or metrics listener.
            let own = [
                Some(("[listener] bind", config.listener.bind)),
                config.metrics.as_ref().map(|m| ("[metrics] bind", m.bind)),
            ];
            match own
                .into_iter()
                .flatten()
                .find(|(_, a)| a.port() == addr.port())
            {
                Some((key, _)) => format!(
                    "broker node ports are node_port_base + node id, and {listener}'s is \
                     {key}'s port: move node_port_base in {file} clear of {}",
                    addr.port()
                ),
                None => another_process(addr, &file),
            }
        }
        ProxyError::Bind { addr, source, .. } if source.kind() == io::ErrorKind::AddrInUse => {
            another_process(addr, &file)
        }
        ProxyError::Bind { addr, .. } => {
            format!(
                "check [listener] bind and node_port_base in {file}: {addr} cannot be used here"
            )
        }
        ProxyError::Bootstrap { .. } => format!(
            "start the broker, or point [upstream] bootstrap_servers in {file} at one that runs"
        ),
        ProxyError::NodePortOverflow { .. } => format!("lower [listener] node_port_base in {file}"),
        ProxyError::InvalidSettings(_) => format!("check {file} with `kpress check-config`"),
    }
}

fn another_process(addr: &SocketAddr, file: &impl fmt::Display) -> String {
    format!(
        "another process (another kpress?) listens on {addr}: stop it, or change \
         [listener] bind or node_port_base in {file}"
    )
}

/// Completes on the first Ctrl-C (SIGINT) or SIGTERM. The handlers are installed when
/// this is called, not when first polled, so a signal while kpress is still starting
/// stops it gracefully too.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let watch = |kind: SignalKind, name: &'static str| {
            let registered = signal(kind);
            async move {
                match registered {
                    Ok(mut signal) => {
                        signal.recv().await;
                    }
                    Err(err) => {
                        tracing::warn!("cannot watch {name}: {err}");
                        std::future::pending::<()>().await;
                    }
                }
            }
        };
        let interrupt = watch(SignalKind::interrupt(), "Ctrl-C (SIGINT)");
        let terminate = watch(SignalKind::terminate(), "SIGTERM");
        async move {
            tokio::select! {
                () = interrupt => tracing::info!("Ctrl-C: shutting down"),
                () = terminate => tracing::info!("SIGTERM: shutting down"),
            }
        }
    }
    #[cfg(not(unix))]
    async {
        if tokio::signal::ctrl_c().await.is_ok() {
            tracing::info!("Ctrl-C: shutting down");
        } else {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        kpress_config::parse(
            "[listener]\nbind = \"127.0.0.1:19092\"\nnode_port_base = 19090\n\
             [upstream]\nbootstrap_servers = [\"127.0.0.1:9092\"]\n",
            "k.toml",
        )
        .unwrap()
    }

    #[test]
    fn ports_routing_gives_the_proxy_its_host_and_node_ports() {
        let settings = proxy_settings(&config(), Duration::from_secs(3));
        assert_eq!(settings.bind, "127.0.0.1:19092".parse().unwrap());
        assert_eq!(settings.advertised_host, "127.0.0.1");
        assert_eq!(settings.node_port_base, 19090);
        assert_eq!(settings.shutdown_grace, Duration::from_secs(3));
    }

    fn in_use(listener: &str, addr: &str) -> ProxyError {
        ProxyError::Bind {
            listener: listener.into(),
            addr: addr.parse().unwrap(),
            source: io::ErrorKind::AddrInUse.into(),
        }
    }

    #[test]
    fn a_node_port_on_bind_is_blamed_on_node_port_base() {
        let next = what_to_do(
            &in_use("broker node 2", "127.0.0.1:19092"),
            &config(),
            Path::new("k.toml"),
        );
        assert!(
            next.contains("move node_port_base in k.toml clear of 19092"),
            "{next}"
        );
    }

    #[test]
    fn a_node_port_on_the_metrics_port_is_blamed_on_node_port_base() {
        let mut config = config();
        config.metrics = Some(kpress_config::MetricsSettings {
            bind: "127.0.0.1:19095".parse().unwrap(),
        });
        let next = what_to_do(
            &in_use("broker node 5", "127.0.0.1:19095"),
            &config,
            Path::new("k.toml"),
        );
        assert!(
            next.contains("broker node 5's is [metrics] bind's port: move node_port_base"),
            "{next}"
        );
    }

    #[test]
    fn a_port_another_process_holds_is_named_with_the_keys_to_change() {
        let path = Path::new("k.toml");
        for (listener, addr) in [
            ("bootstrap", "127.0.0.1:19092"),
            ("broker node 1", "127.0.0.1:19091"),
        ] {
            let next = what_to_do(&in_use(listener, addr), &config(), path);
            assert!(
                next.contains(&format!(
                    "another process (another kpress?) listens on {addr}"
                )) && next.contains("[listener] bind or node_port_base in k.toml"),
                "{next}"
            );
        }
    }

    #[test]
    fn unreachable_brokers_point_at_upstream_bootstrap_servers() {
        let err = ProxyError::Bootstrap {
            attempts: "127.0.0.1:1: refused".into(),
        };
        let next = what_to_do(&err, &config(), Path::new("k.toml"));
        assert!(
            next.contains("[upstream] bootstrap_servers in k.toml"),
            "{next}"
        );
    }
}
