//! `kpress doctor --config FILE`: asks the brokers a policy names whether they would
//! undo or refuse kpress's work, and whether kpress can reach them at all.
//!
//! It connects as `kpress run` does (`[upstream]`, `[upstream.tls]`, kpress's own
//! `[upstream.sasl]` login), then reports:
//! - each bootstrap server's and each advertised broker's reachability (TCP, TLS,
//!   SASL), and each broker's Kafka version as far as its ApiVersions tell;
//! - per topic, its `compression.type`, levels and `max.message.bytes` next to the
//!   policy's target for it, with a problem where the broker would recompress what
//!   kpress wrote, or refuse a batch kpress may write;
//! - the gzip providers of this host;
//! - with auto rules, whether the replicas could share the autopilot's fleet topic
//!   (kpress's principal may describe, create, write and read it) or would each decide
//!   alone;
//! - with `--admin`, the consumers a running kpress has seen that do not read every
//!   codec, per topic they cannot read as stored, and whether kpress re-encodes for
//!   them.
//!
//! Exit 0 when nothing is a problem, 1 otherwise; notes (`info`) never fail it.
//!
//! `findings` turns what was read into findings (no network), `report` prints them
//! (text, or the JSON document), and `probes` does the asking.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use crate::check_config;
use crate::format::Format;

mod autopilot;
mod consumers;
mod findings;
mod probes;
mod report;

use report::Report;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The policy file, as `kpress run` takes it.
    #[arg(long, short = 'c', value_name = "FILE")]
    config: PathBuf,
    /// text (default) or json: one JSON document on stdout.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// A running kpress's admin endpoint, http://HOST:PORT: report the consumers it
    /// has seen that cannot read a topic's codec.
    #[arg(long, value_name = "URL")]
    admin: Option<String>,
}

pub(crate) fn main(args: Args) -> anyhow::Result<ExitCode> {
    let config_name = args.config.display().to_string();
    let config = match check_config::load_checked(&args.config) {
        Ok(config) => config,
        Err((_, lines)) => {
            let report = Report {
                config: config_name,
                findings: lines.into_iter().map(findings::config_invalid).collect(),
                ..Report::default()
            };
            print(&report, args.format)?;
            return Ok(ExitCode::FAILURE);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let mut report = runtime.block_on(probes::examine(config_name, &config))?;
    if let Some(admin) = &args.admin {
        match consumers::read(admin) {
            Ok(seen) => report
                .findings
                .extend(consumers::consumer_findings(&seen, &report.topics)),
            Err(err) => report.findings.push(consumers::admin_unread(admin, &err)),
        }
    }
    print(&report, args.format)?;
    Ok(if report.problems() == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print(report: &Report, format: Format) -> anyhow::Result<()> {
    match format {
        Format::Text => print!("{}", report.text()),
        Format::Json => println!("{:#}", report.json().context("writing the report as JSON")?),
    }
    Ok(())
}
