//! The `kpress` command: the proxy (`run`), its config checker (`check-config`), and
//! offline recompression of Kafka log segments (`recompress`).

use clap::{Parser, Subcommand};

mod admin;
mod advise;
mod bench;
mod check_config;
mod doctor;
mod format;
mod gzip_providers;
mod healthcheck;
mod logging;
mod plain_http;
mod policy_reload;
mod recompress;
mod reload;
mod run;
mod secret;
#[cfg(test)]
mod test_policy;
mod upstream_login;

#[derive(Debug, Parser)]
#[command(
    name = "kpress",
    version,
    about = "Kafka-compatible proxy that recompresses produced record batches per topic"
)]
struct Cli {
    /// Log filter, e.g. `info` or `kpress_proxy=debug,info` (overrides KPRESS_LOG,
    /// RUST_LOG and the policy's [log] level).
    #[arg(long, global = true, value_name = "FILTER")]
    log: Option<String>,
    /// Log lines for people (`text`) or one JSON object per event (`json`).
    #[arg(long, global = true, value_enum, default_value_t = logging::LogFormat::Text)]
    log_format: logging::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the proxy in front of the brokers named in the policy file.
    Run(run::Args),
    /// Validate a policy file and report every problem with file, line, key and value.
    CheckConfig(check_config::Args),
    /// Recompress every record batch of a file of concatenated batches (a Kafka log segment).
    Recompress(recompress::Args),
    /// Ask the brokers a policy names whether they would undo or refuse kpress's work.
    Doctor(doctor::Args),
    /// Rank codecs and options for a goal on a dataset, a segment or the proxy's shadow
    /// trials, and print the `[[topics]]` rules to paste.
    Advise(advise::Args),
    /// Measure codecs and options on a dataset or log segment (KIP-780's TestCompression).
    Bench(bench::Args),
    /// GET an admin endpoint URL (default http://127.0.0.1:9464/healthz): exit 0 on 200, else 1.
    Healthcheck(healthcheck::Args),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Run(_)) {
        // `kpress check-config … | head` ends quietly, as Unix tools do, instead of a
        // panic on the closed pipe; the proxy keeps SIGPIPE ignored for its sockets.
        restore_default_sigpipe();
    }
    if let Err(err) = logging::init(cli.log.as_deref(), cli.log_format) {
        eprintln!("kpress: error: {err}");
        return std::process::ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Run(args) => run::main(args),
        Command::CheckConfig(args) => check_config::main(args),
        Command::Recompress(args) => recompress::main(args),
        Command::Doctor(args) => doctor::main(args),
        Command::Healthcheck(args) => healthcheck::main(args),
        Command::Bench(args) => bench::main(args),
        Command::Advise(args) => advise::main(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("kpress: error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(unix)]
fn restore_default_sigpipe() {
    // SAFETY: called once at start, before any thread exists; SIG_DFL is a valid
    // disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
fn restore_default_sigpipe() {}
