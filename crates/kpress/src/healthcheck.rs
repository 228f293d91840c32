//! `kpress healthcheck URL`: one HTTP/1.0 GET against kpress's admin endpoint, exit 0
//! on a 200 answer and 1 otherwise. It exists for container images without curl or wget
//! (the Dockerfile's HEALTHCHECK), so it is std-only and speaks plain HTTP to an
//! address: no TLS, no name lookup beyond what `ToSocketAddrs` does, no redirects.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// What one check may take in all, connecting included: a probe that hangs is a
/// failed probe.
const DEADLINE: Duration = Duration::from_secs(3);

/// The status line and headers are all that is read; an admin answer's head is far
/// smaller.
const MAX_HEAD_BYTES: usize = 16 * 1024;

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

/// `http://host:port/path` split into the address to connect to, the Host header and
/// the request path.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    authority: String,
    path: String,
}

fn parse_url(url: &str) -> anyhow::Result<Target> {
    let Some(rest) = url.strip_prefix("http://") else {
        bail!("only http:// URLs are supported (the admin endpoint serves plain HTTP)");
    };
    let (authority, path) = match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash..]),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        bail!("no host in the URL");
    }
    if authority.contains('@') {
        bail!("credentials in the URL are not supported");
    }
    let has_port = match authority.rfind(']') {
        Some(bracket) => authority[bracket..].contains(':'),
        None => authority.contains(':'),
    };
    if !has_port {
        bail!("the URL needs a port, e.g. http://127.0.0.1:9464/healthz");
    }
    if path.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        bail!("the path has a space or a control character");
    }
    Ok(Target {
        authority: authority.to_string(),
        path: path.to_string(),
    })
}

/// The status code of `GET url`.
fn check(url: &str) -> anyhow::Result<u16> {
    let target = parse_url(url)?;
    let started = Instant::now();
    // `to_socket_addrs` takes `host:port` and `[v6]:port` as URLs write them.
    let addresses: Vec<SocketAddr> = target
        .authority
        .to_socket_addrs()
        .with_context(|| format!("resolving {}", target.authority))?
        .collect();
    let mut last_error = None;
    let mut stream = None;
    for address in addresses {
        match TcpStream::connect_timeout(&address, DEADLINE) {
            Ok(connected) => {
                stream = Some(connected);
                break;
            }
            Err(err) => last_error = Some(format!("connecting to {address}: {err}")),
        }
    }
    let Some(mut stream) = stream else {
        bail!(last_error.unwrap_or_else(|| "no address to connect to".into()));
    };
    let remaining = DEADLINE
        .checked_sub(started.elapsed())
        .filter(|d| !d.is_zero())
        .context("timed out connecting")?;
    stream.set_read_timeout(Some(remaining))?;
    stream.set_write_timeout(Some(remaining))?;
    let request = format!(
        "GET {} HTTP/1.0\r\nHost: {}\r\nUser-Agent: kpress-healthcheck\r\n\r\n",
        target.path, target.authority
    );
    stream
        .write_all(request.as_bytes())
        .context("sending the request")?;
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
    status_code(&head)
}

/// The code of an `HTTP/1.x NNN reason` status line.
fn status_code(head: &[u8]) -> anyhow::Result<u16> {
    let line_end = head.iter().position(|&b| b == b'\n').unwrap_or(head.len());
    let line = String::from_utf8_lossy(&head[..line_end]);
    let mut parts = line.trim_end().splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    let code = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") || code.len() != 3 {
        bail!("not an HTTP/1 status line: {:?}", line.trim_end());
    }
    code.parse::<u16>()
        .with_context(|| format!("not an HTTP/1 status line: {:?}", line.trim_end()))
}

#[cfg(test)]
mod tests {
    use super::*;
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

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("http://127.0.0.1:9464/healthz").unwrap(),
            Target {
                authority: "127.0.0.1:9464".into(),
                path: "/healthz".into()
            }
        );
        assert_eq!(parse_url("http://[::1]:9464").unwrap().path, "/");
        assert!(parse_url("https://127.0.0.1:9464/healthz").is_err());
        assert!(parse_url("http://127.0.0.1/healthz").is_err());
        assert!(parse_url("http://[::1]/healthz").is_err());
        assert!(parse_url("http:///healthz").is_err());
        assert!(parse_url("http://u:p@127.0.0.1:1/").is_err());
        assert!(parse_url("http://127.0.0.1:1/a b").is_err());
    }
}
