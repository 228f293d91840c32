//! `kpress check-config FILE...`: validates policy files, naming every problem by file,
//! line, key, value and allowed range, and every setting that cannot take effect as a
//! warning (`--strict` refuses them; `--running` adds what a reload could not apply);
//! `--format json` prints one JSON document.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use std::fmt::Write as _;

use kpress_config::{
    Config, ConfigError, ListenerTls, NodeRouting, PasswordSource, Problem, UpstreamTls,
};
use serde_json::{json, Value};

use crate::format::Format;
use crate::gzip_providers;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Policy files to check.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// text (default) or json: one JSON document on stdout.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// A file with warnings fails too (exit 1): for CI.
    #[arg(long)]
    strict: bool,
    /// The policy a running kpress started with: each FILE is checked as a reload of
    /// it, and every key it changes that needs a restart is a warning.
    #[arg(long, value_name = "CURRENT")]
    running: Option<PathBuf>,
}

/// A policy file as loaded: usable, or why not.
type Loaded = Result<Config, (Unusable, Vec<FileProblem>)>;

pub(crate) fn main(args: Args) -> anyhow::Result<ExitCode> {
    let running = match &args.running {
        None => None,
        Some(path) => match load_problems(path) {
            Ok(config) => Some(config),
            Err((_, problems)) => {
                match args.format {
                    Format::Text => {
                        eprintln!("kpress: --running {} is not usable:", path.display());
                        for line in problem_lines(path, &problems) {
                            eprintln!("{line}");
                        }
                    }
                    Format::Json => println!(
                        "{:#}",
                        json!({
                            "files": [],
                            "running": {
                                "path": path.display().to_string(),
                                "ok": false,
                                "problems": problems.iter().map(FileProblem::json).collect::<Vec<_>>(),
                            },
                        })
                    ),
                }
                return Ok(ExitCode::FAILURE);
            }
        },
    };
    let checked: Vec<(&PathBuf, Loaded)> = args
        .files
        .iter()
        .map(|path| {
            let mut loaded = load_problems(path);
            if let (Ok(config), Some(running)) = (&mut loaded, &running) {
                with_restart_changes(config, running);
            }
            (path, loaded)
        })
        .collect();
    let passes = |result: &Loaded| match result {
        Ok(config) => !args.strict || config.warnings.is_empty(),
        Err(_) => false,
    };
    let all_ok = checked.iter().all(|(_, result)| passes(result));
    match args.format {
        Format::Text => print_text(&checked, args.strict),
        Format::Json => {
            let mut report = json_report(&checked, args.strict);
            if let Some(path) = &args.running {
                report["running"] = json!({
                    "path": path.display().to_string(),
                    "ok": true,
                    "problems": [],
                });
            }
            println!("{report:#}");
        }
    }
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Adds to `config`'s warnings each key a reload of it could not apply to a kpress
/// running `running`, in file order.
fn with_restart_changes(config: &mut Config, running: &Config) {
    let changes = config.restart_changes(running);
    config.warnings.extend(changes);
    config.warnings.sort_by_key(|w| (w.line, w.column));
}

fn print_text(checked: &[(&PathBuf, Loaded)], strict: bool) {
    let mut any_ok = false;
    for (path, result) in checked {
        match result {
            Ok(config) => {
                for warning in &config.warnings {
                    eprintln!("warning: {warning}");
                }
                let n = config.warnings.len();
                if strict && n > 0 {
                    eprintln!(
                        "{}: {n} warning{}, refused by --strict",
                        path.display(),
                        if n == 1 { "" } else { "s" }
                    );
                    continue;
                }
                println!("{}: ok", path.display());
                print!("{}", summary(config));
                any_ok = true;
            }
            Err((_, problems)) => {
                for line in problem_lines(path, problems) {
                    eprintln!("{line}");
                }
            }
        }
    }
    // Process-wide, so once: what the files' gzip providers would run on here.
    if any_ok {
        println!("gzip providers on this host:");
        for status in gzip_providers::statuses() {
            println!("  {}", gzip_providers::describe(&status));
        }
    }
}

/// `{"files": [{"path", "ok", "problems": [...], "warnings": [...]}], "gzip_providers"}`;
/// with `strict`, a file with warnings is not `ok`.
fn json_report(checked: &[(&PathBuf, Loaded)], strict: bool) -> Value {
    let files: Vec<Value> = checked
        .iter()
        .map(|(path, result)| {
            let (problems, warnings): (Vec<Value>, Vec<Value>) = match result {
                Ok(config) => (
                    Vec::new(),
                    config.warnings.iter().map(problem_json).collect(),
                ),
                Err((_, problems)) => {
                    (problems.iter().map(FileProblem::json).collect(), Vec::new())
                }
            };
            let ok = result.is_ok() && (!strict || warnings.is_empty());
            json!({
                "path": path.display().to_string(),
                "ok": ok,
                "problems": problems,
                "warnings": warnings,
            })
        })
        .collect();
    json!({
        "files": files,
        "gzip_providers": gzip_providers::statuses_json(),
    })
}

fn problem_json(problem: &Problem) -> Value {
    json!({
        "line": problem.line,
        "column": problem.column,
        "key": problem.key,
        "value": problem.value,
        "message": problem.message,
        "allowed": problem.allowed,
        "did_you_mean": problem.did_you_mean,
    })
}

/// Why a policy file cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unusable {
    /// The file itself cannot be read.
    Unreadable,
    /// Its text, or a certificate or key it names, is invalid.
    Invalid,
}

/// One thing that keeps a policy file from being used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FileProblem {
    /// In the file's text, located by line and column.
    Text(Problem),
    /// The file cannot be read.
    Unreadable(String),
    /// A certificate or key the file names does not load.
    Tls(String),
}

impl FileProblem {
    fn json(&self) -> Value {
        match self {
            FileProblem::Text(problem) => problem_json(problem),
            FileProblem::Unreadable(message) | FileProblem::Tls(message) => json!({
                "line": null,
                "column": null,
                "key": null,
                "value": null,
                "message": message,
                "allowed": null,
                "did_you_mean": null,
            }),
        }
    }
}

/// Loads a policy file and the TLS files it names, printing every problem to stderr
/// when it is not usable.
pub(crate) fn load_reporting(path: &Path) -> Result<Config, Unusable> {
    load_checked(path).map_err(|(unusable, lines)| {
        for line in lines {
            eprintln!("{line}");
        }
        unusable
    })
}

/// Loads a policy file and the TLS files it names; when it is not usable, the lines
/// `check-config` prints about it.
pub(crate) fn load_checked(path: &Path) -> Result<Config, (Unusable, Vec<String>)> {
    load_problems(path).map_err(|(unusable, problems)| (unusable, problem_lines(path, &problems)))
}

/// Loads a policy file and the TLS files it names; when it is not usable, why.
pub(crate) fn load_problems(path: &Path) -> Loaded {
    let config = match kpress_config::load(path) {
        Ok(config) => config,
        Err(err @ ConfigError::Read { .. }) => {
            return Err((
                Unusable::Unreadable,
                vec![FileProblem::Unreadable(err.to_string())],
            ));
        }
        Err(ConfigError::Invalid(problems)) => {
            return Err((
                Unusable::Invalid,
                problems.into_iter().map(FileProblem::Text).collect(),
            ));
        }
    };
    let tls_problems = tls_problems(&config);
    if !tls_problems.is_empty() {
        return Err((
            Unusable::Invalid,
            tls_problems.into_iter().map(FileProblem::Tls).collect(),
        ));
    }
    Ok(config)
}

/// The lines `check-config` prints for an unusable file: one per problem, then their
/// count (none for a file that cannot be read).
fn problem_lines(path: &Path, problems: &[FileProblem]) -> Vec<String> {
    let mut lines: Vec<String> = problems
        .iter()
        .map(|problem| match problem {
            FileProblem::Text(problem) => problem.to_string(),
            FileProblem::Unreadable(message) => format!("kpress: {message}"),
            FileProblem::Tls(message) => format!("{}: {message}", path.display()),
        })
        .collect();
    if !matches!(problems, [FileProblem::Unreadable(_)]) {
        lines.push(problem_count(path, problems.len()));
    }
    lines
}

fn problem_count(path: &Path, n: usize) -> String {
    format!(
        "{}: {n} problem{}",
        path.display(),
        if n == 1 { "" } else { "s" }
    )
}

/// The certificates and keys, loaded as `kpress run` loads them: a file that exists but
/// holds no certificate, a key that does not go with its certificate, and the like.
fn tls_problems(config: &Config) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(tls) = &config.listener.tls {
        if let Err(err) = kpress_proxy::tls::ServerTls::load(tls.clone()) {
            problems.push(err.to_string());
        }
    }
    if let Some(tls) = &config.upstream.tls {
        if let Err(err) = kpress_proxy::tls::ClientTls::load(tls.clone()) {
            problems.push(err.to_string());
        }
    }
    problems
}

/// What the file makes kpress do, in a few lines.
pub(crate) fn summary(config: &Config) -> String {
    let mut out = String::new();
    let l = &config.listener;
    let servers = config.upstream.bootstrap_servers.join(", ");
    let _ = match &l.routing {
        NodeRouting::Ports {
            advertised_host,
            node_port_base,
        } => writeln!(
            out,
            "  listen {} (advertised as {advertised_host}, broker node N on port {node_port_base}+N \
             for node ids 0..={}) -> {servers}",
            l.bind,
            u16::MAX - node_port_base,
        ),
        NodeRouting::Sni {
            advertised_host_pattern,
            bootstrap_host,
            advertised_port,
        } => writeln!(
            out,
            "  listen {} (sni mode: broker nodes as {advertised_host_pattern}:{advertised_port}, \
             bootstrap {}) -> {servers}",
            l.bind,
            match bootstrap_host {
                Some(host) => format!("as {host}:{advertised_port} or without SNI"),
                None => "without SNI".to_owned(),
            }
        ),
    };
    let _ = writeln!(out, "  clients: {}", listener_tls(l.tls.as_ref()));
    let _ = writeln!(
        out,
        "  brokers: {}",
        upstream_tls(config.upstream.tls.as_ref())
    );
    if let Some(sasl) = &config.upstream.sasl {
        let password = match &sasl.password {
            PasswordSource::File(path) => format!("from file {}", path.display()),
            PasswordSource::Env(name) => format!("from ${name}"),
        };
        let _ = writeln!(
            out,
            "  kpress's own SASL: {} as {:?}, password {password}",
            sasl.mechanism.name(),
            sasl.username
        );
    }
    if let Some(source) = &config.upstream.oauthbearer {
        let _ = writeln!(
            out,
            "  kpress's own SASL: OAUTHBEARER, {}",
            bearer_source(source)
        );
    }
    if l.reuse_port {
        let _ = writeln!(
            out,
            "  reuse_port: other kpress processes may share these ports (SO_REUSEPORT)"
        );
    }
    let _ = writeln!(
        out,
        "  rewrite_before_auth {}",
        if l.rewrite_before_auth {
            "true: batches are rewritten from a connection's first request"
        } else {
            "false: a connection's batches pass untouched until it has authenticated (SASL)"
        }
    );
    match &config.admin {
        Some(a) => {
            let _ = writeln!(
                out,
                "  admin endpoint http://{} (ready when a broker answered within {}s)",
                a.bind,
                a.readiness_window.as_secs()
            );
        }
        None => {
            let _ = writeln!(out, "  admin endpoint off");
        }
    }
    if let Some(shadow) = &config.trial_settings() {
        let candidates: Vec<String> = shadow.candidates.iter().map(|c| c.to_string()).collect();
        let _ = writeln!(
            out,
            "  shadow trials of {} of each topic's batches with {} (at most {} of the CPUs, {} low-priority thread(s))",
            shadow.sample,
            candidates.join(", "),
            shadow.max_cpu_fraction,
            shadow.threads
        );
    }
    let overload = &config.overload;
    if overload.adaptive {
        let _ = writeln!(
            out,
            "  adaptive levels: a rule steps down a notch after {} pressured windows of {} ms \
             (a missed max_rewrite_wait_ms, or a mean wait over {} ms), back up after {} calm ones",
            kpress_config::overload::STEP_DOWN_AFTER,
            overload.window_ms,
            overload.target_wait_ms,
            kpress_config::overload::STEP_UP_AFTER,
        );
    }
    let consumers = &config.consumers;
    if consumers.reencode {
        let level = format!("compression.{}.level", consumers.codec.name());
        let level = consumers
            .options
            .get(&level)
            .map_or(String::new(), |n| format!(" (level {n})"));
        let _ = writeln!(
            out,
            "  consumers: Fetch batches a client cannot read are re-encoded into {}{level}, \
             else into a codec it reads; {} bytes of re-encoded batches cached",
            consumers.codec, consumers.cache_bytes
        );
    } else {
        let _ = writeln!(
            out,
            "  consumers: Fetch responses pass as the broker sent them (reencode = false)"
        );
    }
    for (i, rule) in consumers.clients.rules().iter().enumerate() {
        let patterns = [
            ("match", rule.client_id.as_ref().map(ToString::to_string)),
            ("software", rule.software.as_ref().map(ToString::to_string)),
            ("listener", rule.listener.as_ref().map(ToString::to_string)),
        ];
        let patterns: Vec<String> = patterns
            .into_iter()
            .filter_map(|(key, p)| p.map(|p| format!("{key} {p}")))
            .collect();
        let _ = writeln!(
            out,
            "  client rule {} (line {}) {}: reads {}",
            i + 1,
            rule.line,
            patterns.join(", "),
            rule.accept
        );
    }
    for (i, rule) in config.topics.iter().enumerate() {
        let _ = writeln!(
            out,
            "  rule {} (line {}) {}: {}",
            i + 1,
            rule.line,
            rule.pattern,
            rule.policy
        );
    }
    let _ = writeln!(out, "  other topics: {}", config.defaults);
    let topic_mode = std::iter::once(&config.defaults)
        .chain(config.topics.iter().map(|rule| &rule.policy))
        .any(|policy| policy.compression == kpress_config::Compression::Topic);
    if topic_mode {
        let _ = writeln!(
            out,
            "  topic mode: each topic's compression.type and level read from the cluster \
             every {} ms (kpress's principal needs DESCRIBE_CONFIGS); until then, and \
             where they cannot be read, batches pass as sent",
            config.upstream.topic_config_refresh.as_millis()
        );
    }
    out
}

/// TLS from clients, as one line.
fn listener_tls(tls: Option<&ListenerTls>) -> String {
    let Some(tls) = tls else {
        return "plaintext".to_owned();
    };
    let mut line = format!(
        "TLS {}+ (cert {}, key {})",
        tls.min_version.name(),
        tls.cert.display(),
        tls.key.display()
    );
    if let Some(ca) = &tls.client_ca {
        let _ = write!(
            line,
            ", client certificates {} (signed by {})",
            tls.client_auth.name(),
            ca.display()
        );
    }
    line
}

/// TLS to brokers, as one line.
fn upstream_tls(tls: Option<&UpstreamTls>) -> String {
    let Some(tls) = tls else {
        return "plaintext".to_owned();
    };
    let mut line = "TLS".to_owned();
    if tls.verify {
        match &tls.ca {
            Some(ca) => {
                let _ = write!(line, ", certificates checked against {}", ca.display());
            }
            None => line.push_str(", certificates checked against the system's roots"),
        }
    } else {
        line.push_str(", certificates NOT verified (verify = false: any certificate is accepted)");
    }
    if let Some(name) = &tls.server_name {
        let _ = write!(line, " for the name {name}");
    }
    if let Some((cert, key)) = &tls.client_cert {
        let _ = write!(
            line,
            ", client certificate {} (key {})",
            cert.display(),
            key.display()
        );
    }
    line
}

/// Where kpress's OAUTHBEARER tokens come from, naming places, never secrets.
fn bearer_source(source: &kpress_config::BearerTokenSource) -> String {
    match source {
        kpress_config::BearerTokenSource::ClientCredentials {
            token_endpoint_url,
            client_id,
            client_secret,
            scope,
        } => format!(
            "tokens from {token_endpoint_url} as client {client_id:?}, secret {}{}",
            match client_secret {
                PasswordSource::File(path) => format!("from file {}", path.display()),
                PasswordSource::Env(name) => format!("from ${name}"),
            },
            scope
                .as_ref()
                .map_or_else(String::new, |scope| format!(", scope {scope:?}"))
        ),
        kpress_config::BearerTokenSource::TokenFile(path) => {
            format!(
                "tokens from file {} (re-read when it changes)",
                path.display()
            )
        }
        kpress_config::BearerTokenSource::AwsMskIam { region } => format!(
            "AWS MSK IAM tokens for {region}, signed with AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN if set), or with a role assumed by \
             AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UPSTREAM: &str = "[upstream]\nbootstrap_servers = [\"k1:9093\", \"k2:9093\"]\n";

    fn summary_of(text: &str) -> String {
        summary(&kpress_config::parse(text, "t.toml").unwrap_or_else(|e| panic!("{e}")))
    }

    #[test]
    fn adaptive_levels_and_fallbacks_are_shown() {
        let out = summary_of(&format!(
            "[listener]\nbind = \"127.0.0.1:19092\"\n{UPSTREAM}[overload]\nadaptive = true\n\
             [[topics]]\nmatch = \"heavy.*\"\ncompression.type = \"zstd\"\n\
             compression.zstd.level = 19\noverload.min_level = 3\n\
             overload.compression.type = \"lz4\"\n"
        ));
        assert!(
            out.contains(
                "  adaptive levels: a rule steps down a notch after 3 pressured windows of 1000 ms \
                 (a missed max_rewrite_wait_ms, or a mean wait over 100 ms), back up after 5 calm ones\n"
            ),
            "{out}"
        );
        assert!(
            out.contains(", under overload lz4 (compression.lz4.level=9), overload.min_level=3\n"),
            "{out}"
        );
        let off = summary_of(&format!(
            "[listener]\nbind = \"127.0.0.1:19092\"\n{UPSTREAM}"
        ));
        assert!(!off.contains("adaptive"), "{off}");
    }

    #[test]
    fn an_auto_rule_is_shown_with_the_trials_it_runs() {
        let out = summary_of(&format!(
            "[listener]\nbind = \"127.0.0.1:19092\"\n{UPSTREAM}\
             [[topics]]\nmatch = \"logs.*\"\ncompression.type = \"auto\"\n"
        ));
        assert!(
            out.contains(
                "logs.*: auto (candidates zstd:3, lz4:9, gzip:6, snappy; initial producer; \
                 objective bytes; budget none; min 30 samples, margin 2%, at most 4 \
                 changes/hour), recompress codec-differs, only if smaller\n"
            ),
            "{out}"
        );
        assert!(
            out.contains(
                "  shadow trials of 0.01 of each topic's batches with zstd:3, lz4:9, \
                 gzip:6, snappy ("
            ),
            "{out}"
        );
    }

    #[test]
    fn a_plaintext_ports_file_says_so() {
        let out = summary_of(&format!(
            "[listener]\nbind = \"127.0.0.1:19092\"\nnode_port_base = 19100\n{UPSTREAM}"
        ));
        let lines: Vec<&str> = out.lines().take(4).collect();
        assert_eq!(
            lines,
            [
                "  listen 127.0.0.1:19092 (advertised as 127.0.0.1, broker node N on port 19100+N for node ids 0..=46435) -> k1:9093, k2:9093",
                "  clients: plaintext",
                "  brokers: plaintext",
                "  rewrite_before_auth true: batches are rewritten from a connection's first request",
            ]
        );
    }

    #[test]
    fn a_two_key_file_shows_the_derived_node_ports_and_host() {
        let out = summary_of(&format!(
            "[listener]\nbind = \"127.0.0.1:9092\"\n{UPSTREAM}"
        ));
        assert!(
            out.starts_with("  listen 127.0.0.1:9092 (advertised as 127.0.0.1, broker node N on port 9192+N for node ids 0..=56343) -> k1:9093, k2:9093\n"),
            "{out}"
        );
        assert!(out.contains("  admin endpoint off\n"), "{out}");
        assert!(
            out.contains("  topic mode: each topic's compression.type"),
            "{out}"
        );
        let out = summary_of(&format!(
            "[listener]\nbind = \"0.0.0.0:9092\"\n{UPSTREAM}[admin]\nbind = \"127.0.0.1:9100\"\n"
        ));
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert!(
            out.starts_with(&format!(
                "  listen 0.0.0.0:9092 (advertised as {}, broker node N on port 9192+N",
                host.trim()
            )),
            "{out}"
        );
        assert!(
            out.contains("  admin endpoint http://127.0.0.1:9100 (ready when a broker answered within 30s)\n"),
            "{out}"
        );
    }

    #[test]
    fn oauthbearer_sources_are_named_by_place() {
        let listener = "[listener]\nbind = \"127.0.0.1:19092\"\nnode_port_base = 19100\n";
        for (keys, line) in [
            (
                "token_endpoint_url = \"https://idp.example.com/token\"\nclient_id = \"kpress\"\n\
                 client_secret_env = \"IDP_SECRET\"\nscope = \"kafka\"\n",
                "  kpress's own SASL: OAUTHBEARER, tokens from https://idp.example.com/token as \
                 client \"kpress\", secret from $IDP_SECRET, scope \"kafka\"",
            ),
            (
                "token_file = \"/var/run/secrets/kafka-token\"\n",
                "  kpress's own SASL: OAUTHBEARER, tokens from file \
                 /var/run/secrets/kafka-token (re-read when it changes)",
            ),
            (
                "token_provider = \"aws_msk_iam\"\nregion = \"eu-west-1\"\n",
                "  kpress's own SASL: OAUTHBEARER, AWS MSK IAM tokens for eu-west-1, signed with \
                 AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN if set), \
                 or with a role assumed by AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN",
            ),
        ] {
            let out = summary_of(&format!(
                "{listener}{UPSTREAM}[upstream.sasl]\nmechanism = \"OAUTHBEARER\"\n{keys}"
            ));
            assert!(out.lines().any(|l| l == line), "{out}");
        }
    }

    #[test]
    fn tls_sasl_and_sni_settings_each_get_a_line() {
        let out = summary_of(&format!(
            "[listener]\nbind = \"0.0.0.0:9093\"\nmode = \"sni\"\n\
             advertised_host_pattern = \"b-{{node}}.kafka.example.com\"\n\
             bootstrap_host = \"bootstrap.kafka.example.com\"\n\
             [listener.tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\nclient_ca = \"ca.pem\"\n\
             client_auth = \"requested\"\nmin_version = \"1.3\"\n{UPSTREAM}\
             [upstream.tls]\nca = \"kafka-ca.pem\"\ncert = \"kp.pem\"\nkey = \"kp.key\"\n\
             server_name = \"kafka.internal\"\n\
             [upstream.sasl]\nmechanism = \"SCRAM-SHA-512\"\nusername = \"kpress\"\n\
             password_file = \"secrets/pw\"\n"
        ));
        let lines: Vec<&str> = out.lines().take(5).collect();
        assert_eq!(
            lines,
            [
                "  listen 0.0.0.0:9093 (sni mode: broker nodes as b-{node}.kafka.example.com:9093, bootstrap as bootstrap.kafka.example.com:9093 or without SNI) -> k1:9093, k2:9093",
                "  clients: TLS 1.3+ (cert c.pem, key k.pem), client certificates requested (signed by ca.pem)",
                "  brokers: TLS, certificates checked against kafka-ca.pem for the name kafka.internal, client certificate kp.pem (key kp.key)",
                "  kpress's own SASL: SCRAM-SHA-512 as \"kpress\", password from file secrets/pw",
                "  rewrite_before_auth false: a connection's batches pass untouched until it has authenticated (SASL)",
            ]
        );
    }

    #[test]
    fn unverified_broker_certificates_stand_out() {
        let out = summary_of(&format!(
            "[listener]\nbind = \"127.0.0.1:19092\"\nnode_port_base = 19100\n\
             rewrite_before_auth = true\n{UPSTREAM}\
             [upstream.tls]\nverify = false\n\
             [upstream.sasl]\nmechanism = \"PLAIN\"\nusername = \"kpress\"\n\
             password_env = \"KPRESS_SASL_PASSWORD\"\n"
        ));
        let lines: Vec<&str> = out.lines().skip(1).take(4).collect();
        assert_eq!(
            lines,
            [
                "  clients: plaintext",
                "  brokers: TLS, certificates NOT verified (verify = false: any certificate is accepted)",
                "  kpress's own SASL: PLAIN as \"kpress\", password from $KPRESS_SASL_PASSWORD",
                "  rewrite_before_auth true: batches are rewritten from a connection's first request",
            ]
        );
        let out = summary_of(&format!(
            "[listener]\nbind = \"127.0.0.1:19092\"\nnode_port_base = 19100\n{UPSTREAM}[upstream.tls]\n"
        ));
        assert!(
            out.contains("  brokers: TLS, certificates checked against the system's roots\n"),
            "{out}"
        );
    }
}
