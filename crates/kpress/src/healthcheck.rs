//! `kpress healthcheck URL`: one HTTP/1.0 GET against kpress's admin endpoint, exit 0
//! on a 200 answer and 1 otherwise. It exists for container images without curl or wget
//! (the Dockerfile's HEALTHCHECK), so it is std-only and speaks plain HTTP to an
//! address: no TLS, no name lookup beyond what `ToSocketAddrs` does, no redirects.

use std::io::Read;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::plain_http::{self, MAX_HEAD_BYTES};

/// What one check may take in all, connecting included: a probe that hangs is a
/// failed probe.
const DEADLINE: Duration = Duration::from_secs(3);

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The URL to GET: http://HOST:PORT/PATH (the admin endpoint's /healthz or /readyz).
    #[arg(value_name = "URL", default_value = "http://127.0.0.1:9464/healthz")]
    url: String,
}

pub(crate) fn main(args: Args) -> anyhow::Result<ExitCode> {
    match check(&args.url) {
        Ok(200) => Ok(ExitCode::SUCCESS),
        Ok(status) => {
            eprintln!("kpress healthcheck: {} answered {status}", args.url);
            Ok(ExitCode::FAILURE)
        }
        Err(err) => {
            eprintln!("kpress healthcheck: {}: {err:#}", args.url);
            Ok(ExitCode::FAILURE)
        }
    }
}

/// The status code of `GET url`: only the status line is read.
fn check(url: &str) -> anyhow::Result<u16> {
    let target = plain_http::parse_url(url)?;
    let started = Instant::now();
    let mut stream = plain_http::send_get(&target, "kpress-healthcheck", started, DEADLINE)?;
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while !head.contains(&b'\n') {
        if head.len() >= MAX_HEAD_BYTES || started.elapsed() >= DEADLINE {
            bail!("no status line within {MAX_HEAD_BYTES} bytes or {DEADLINE:?}");
        }
        let n = stream.read(&mut chunk).context("reading the answer")?;
        if n == 0 {
            bail!("the connection closed before a status line");
        }
        head.extend_from_slice(&chunk[..n]);
    }
    plain_http::status_code(&head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;
    use std::thread;

    fn serve_once(answer: &'static [u8]) -> (String, thread::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let server = thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = Vec::new();
            let mut chunk = [0u8; 256];
            while !request.ends_with(b"\r\n\r\n") {
                let n = stream.read(&mut chunk).unwrap();
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&chunk[..n]);
            }
            stream.write_all(answer).unwrap();
            String::from_utf8(request).unwrap()
        });
        (format!("http://{address}/healthz"), server)
    }

    #[test]
    fn a_200_answer_is_healthy_and_the_request_is_http_1_0() {
        let (url, server) = serve_once(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n");
        assert_eq!(check(&url).unwrap(), 200);
        let request = server.join().unwrap();
        assert!(
            request.starts_with("GET /healthz HTTP/1.0\r\n"),
            "{request}"
        );
        assert!(request.contains("\r\nHost: 127.0.0.1:"), "{request}");
    }

    #[test]
    fn other_statuses_are_reported() {
        let (url, server) = serve_once(b"HTTP/1.1 503 Service Unavailable\r\n\r\nnot ready\n");
        assert_eq!(check(&url).unwrap(), 503);
        server.join().unwrap();
    }

    #[test]
    fn garbage_and_closed_connections_are_errors() {
        let (url, server) = serve_once(b"SSH-2.0-OpenSSH\r\n");
        assert!(check(&url).is_err());
        server.join().unwrap();
        let (url, server) = serve_once(b"");
        assert!(check(&url).is_err());
        server.join().unwrap();
    }

    #[test]
    fn nothing_listening_is_an_error() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        assert!(check(&format!("http://{address}/healthz")).is_err());
    }

    #[test]
    fn a_silent_server_fails_within_the_deadline() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let started = Instant::now();
        assert!(check(&format!("http://{address}/healthz")).is_err());
        assert!(started.elapsed() < DEADLINE * 2);
        drop(listener);
    }
}
