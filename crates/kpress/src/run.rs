//! `kpress run --config FILE`: the proxy, with the policy file's rules, its admin
//! endpoint, and a graceful stop on Ctrl-C or SIGTERM.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kpress_config::{Config, TopicConfigSource};
use kpress_proxy::{
    Autopilot, ClusterConnector, Controls, ProxyError, ProxySettings, ProxyStatus, TopicConfigCache,
};
use tokio::sync::watch;

use crate::admin::{self, Admin, AdminServer, PortWait};
use crate::policy_reload::{self, AppliedPolicy};
use crate::{check_config, gzip_providers, reload, upstream_login};

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
                check_config::Unusable::Unreadable => eprintln!(
                    "kpress: not starting: --config needs a policy file kpress can read \
                     (config/kpress.toml is an example)"
                ),
                check_config::Unusable::Invalid => eprintln!(
                    "kpress: not starting: fix {file} (check it with `kpress check-config {file}`)"
                ),
            }
            return Ok(ExitCode::FAILURE);
        }
    };
    crate::logging::apply_policy_level(config.log.level);
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    kpress_proxy::descriptors::raise_limit(config.limits.max_connections)
        .context("not starting")?;
    let provider_statuses = gzip_providers::statuses();
    gzip_providers::log(&provider_statuses);
    let login = match upstream_login::login(&config) {
        Ok(login) => login,
        Err(err) => {
            eprintln!("kpress: not starting: {}: {err:#}", args.config.display());
            return Ok(ExitCode::FAILURE);
        }
    };
    let grace = Duration::from_secs(args.shutdown_grace);
    let settings = ProxySettings::from_config(&config, login, grace);
    let topic_configs = Arc::new(TopicConfigCache::new(config.upstream.topic_config_refresh));

    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all().thread_name("kpress");
    if let Some(n) = args.worker_threads {
        runtime.worker_threads(n.max(1));
    }
    let runtime = runtime.build().context("starting the tokio runtime")?;
    runtime.block_on(async {
        let metrics = match &config.admin {
            Some(_) => Some(admin::install_metrics(&provider_statuses)?),
            None => None,
        };
        tracing::info!(
            "policy {}:\n{}",
            args.config.display(),
            check_config::summary(&config).trim_end()
        );
        let source: Arc<dyn TopicConfigSource> = Arc::clone(&topic_configs) as _;
        // One per process, kept across reloads: a reload may add the first auto rule.
        let autopilot = Autopilot::new(
            config.autopilot.clone(),
            kpress_proxy::replica_id(config.listener.bind.port()),
            config.limits.max_topic_labels,
        );
        let at_start = AppliedPolicy::at_start(
            &args.config,
            config.clone(),
            Some(source),
            Some(Arc::clone(&autopilot)),
        );
        let (snapshots, policies) = watch::channel(policy_reload::snapshot(&at_start, None));
        // Before serving: SIGHUP's default action would end the process.
        let reload = reload::spawn(&watched_files(&config, &args.config));
        let applied = policy_reload::spawn(at_start, reload.clone(), snapshots);
        policy_reload::spawn_overload_windows(applied.clone());
        // The fleet topic is reached with kpress's own side connections ([upstream]'s
        // TLS and login); without them the autopilot decides alone.
        let connector = ClusterConnector::new(&settings)
            .inspect_err(|err| {
                tracing::warn!(error = %err, "autopilot: no side connection for the fleet topic")
            })
            .ok();
        policy_reload::spawn_autopilot(autopilot, connector, applied.clone());
        let status = Arc::new(ProxyStatus::default());
        // With reuse_port, a restart's new process runs beside the old one with the same
        // policy file: it waits for the admin port, which the old one gives up as its
        // listeners close (see `admin::PortWait` for why the port is not shared).
        let hand_over = config.listener.reuse_port;
        let admin_context = || {
            config.admin.as_ref().map_or_else(String::new, |endpoint| {
                format!(
                    "starting the admin endpoint on {} ([admin] bind in {})",
                    endpoint.bind,
                    args.config.display()
                )
            })
        };
        let admin_server = match (&config.admin, metrics) {
            (Some(endpoint), Some(metrics)) => {
                let admin = Admin::new(
                    endpoint,
                    metrics,
                    Arc::clone(&status),
                    applied,
                    settings.upstream.clone(),
                    Arc::clone(&topic_configs),
                );
                let wait = hand_over.then_some(PortWait::RESTART);
                let server = AdminServer::start(endpoint.bind, admin, wait)
                    .await
                    .with_context(admin_context)?;
                Some(server)
            }
            _ => None,
        };
        let signal = shutdown_signal();
        let shutdown = async {
            let Some(server) = &admin_server else {
                return signal.await;
            };
            tokio::select! {
                () = signal => {}
                () = server.gave_up() => {}
            }
            if hand_over {
                server.close_port();
            }
        };
        let controls = Controls {
            shutdown,
            reload_tls: reload,
            policies,
            status,
            topic_configs,
        };
        let served = kpress_proxy::run(settings, controls).await;
        let admin_stopped = match admin_server {
            Some(server) => server.stop().await,
            None => Ok(()),
        };
        served.map_err(|err| {
            let next = what_to_do(&err, &config, &args.config);
            anyhow::anyhow!("{err}\n  {next}").context("proxy stopped")
        })?;
        admin_stopped.with_context(admin_context)
    })?;
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

/// The files kpress re-reads while serving: the policy, its TLS certificates, keys and
/// CAs.
fn watched_files(config: &Config, policy: &Path) -> Vec<PathBuf> {
    let mut files = vec![policy.to_owned()];
    if let Some(tls) = &config.listener.tls {
        files.extend([tls.cert.clone(), tls.key.clone()]);
        files.extend(tls.client_ca.clone());
    }
    if let Some(tls) = &config.upstream.tls {
        files.extend(tls.ca.clone());
        if let Some((cert, key)) = &tls.client_cert {
            files.extend([cert.clone(), key.clone()]);
        }
    }
    files
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
                config.admin.as_ref().map(|a| ("[admin] bind", a.bind)),
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
        ProxyError::InvalidSettings(_) | ProxyError::Tls(_) => {
            format!("check {file} with `kpress check-config`")
        }
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
    fn the_policy_maps_onto_the_proxy_settings() {
        let login = upstream_login::login(&config()).unwrap();
        let settings = ProxySettings::from_config(&config(), login, Duration::from_secs(3));
        assert_eq!(settings.listener.bind, "127.0.0.1:19092".parse().unwrap());
        assert_eq!(settings.listener.routing, config().listener.routing);
        assert_eq!(settings.shutdown_grace, Duration::from_secs(3));
        assert!(settings.listener.tls.is_none() && settings.upstream.login.is_none());
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
    fn a_node_port_on_the_admin_port_is_blamed_on_node_port_base() {
        let mut config = config();
        config.admin = Some(kpress_config::AdminSettings {
            bind: "127.0.0.1:19095".parse().unwrap(),
            readiness_window: Duration::from_secs(30),
        });
        let next = what_to_do(
            &in_use("broker node 5", "127.0.0.1:19095"),
            &config,
            Path::new("k.toml"),
        );
        assert!(
            next.contains("broker node 5's is [admin] bind's port: move node_port_base"),
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
