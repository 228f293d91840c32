//! `kpress run --config FILE`: the proxy, with the policy file's rules, its metrics
//! endpoint, and a graceful stop on Ctrl-C or SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kpress_batch::PolicyLookup;
use kpress_config::{Config, PolicySet};
use kpress_proxy::ProxySettings;

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
    let Some(config) = check_config::load_reporting(&args.config) else {
        eprintln!(
            "kpress: not starting: fix {} (check it with `kpress check-config`)",
            args.config.display()
        );
        return Ok(ExitCode::FAILURE);
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
                .with_context(|| format!("starting the metrics endpoint on {}", metrics.bind))?;
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
            .context("proxy stopped")
    })?;
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

fn proxy_settings(config: &Config, shutdown_grace: Duration) -> ProxySettings {
    ProxySettings {
        bind: config.listener.bind,
        advertised_host: config.listener.advertised_host.clone(),
        node_port_base: config.listener.node_port_base,
        bootstrap_servers: config.upstream.bootstrap_servers.clone(),
        max_frame_bytes: config.limits.max_frame_bytes,
        max_inflight_bytes: config.limits.max_inflight_bytes,
        shutdown_grace,
    }
}

/// Completes on the first Ctrl-C (SIGINT) or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::warn!("cannot watch Ctrl-C: {err}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            Err(err) => {
                tracing::warn!("cannot watch SIGTERM: {err}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("Ctrl-C: shutting down"),
        () = terminate => tracing::info!("SIGTERM: shutting down"),
    }
}
