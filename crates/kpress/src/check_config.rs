//! `kpress check-config FILE...`: validates policy files, naming every problem by file,
//! line, key, value and allowed range.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kpress_config::{Config, ConfigError};

use crate::gzip_providers;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Policy files to check.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
}

pub(crate) fn main(args: Args) -> anyhow::Result<ExitCode> {
    let mut all_ok = true;
    let mut any_ok = false;
    for path in &args.files {
        match load_reporting(path) {
            Ok(config) => {
                println!("{}: ok", path.display());
                print!("{}", summary(&config));
                any_ok = true;
            }
            Err(_) => all_ok = false,
        }
    }
    // Process-wide, so once: what the files' gzip providers would run on here.
    if any_ok {
        println!("gzip providers on this host:");
        for status in gzip_providers::statuses() {
            println!("  {}", gzip_providers::describe(&status));
        }
    }
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Loads a policy file, printing every problem to stderr when it is not usable.
pub(crate) fn load_reporting(path: &Path) -> Result<Config, ConfigError> {
    let loaded = kpress_config::load(path);
    match &loaded {
        Ok(_) => {}
        Err(err @ ConfigError::Read { .. }) => eprintln!("kpress: {err}"),
        Err(ConfigError::Invalid(problems)) => {
            for problem in problems {
                eprintln!("{problem}");
            }
            let n = problems.len();
            eprintln!(
                "{}: {n} problem{}",
                path.display(),
                if n == 1 { "" } else { "s" }
            );
        }
    }
    loaded
}

/// What the file makes kpress do, in a few lines.
pub(crate) fn summary(config: &Config) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let l = &config.listener;
    let _ = writeln!(
        out,
        "  listen {} (advertised as {}, broker node N on port {}+N) -> {}",
        l.bind,
        l.advertised_host,
        l.node_port_base,
        config.upstream.bootstrap_servers.join(", ")
    );
    match &config.metrics {
        Some(m) => {
            let _ = writeln!(out, "  metrics http://{}/metrics", m.bind);
        }
        None => {
            let _ = writeln!(out, "  metrics off");
        }
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
    out
}
