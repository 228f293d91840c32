//! One HTTP/1.0 GET against kpress's admin endpoint, which serves plain HTTP:
//! `kpress healthcheck`, `kpress advise --from-metrics` and `kpress doctor --admin` read
//! it through here. Std-only (the healthcheck runs in images without curl), with one
//! deadline over connecting and reading and a cap on what is read: an endpoint that
//! hangs or answers without end fails the command instead of holding it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// `http://host:port/path` split into the address to connect to (and the Host header)
/// and the request path.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) authority: String,
    pub(crate) path: String,
}

/// The parts of an `http://HOST:PORT[/PATH]` URL; the port is required, credentials
/// and other schemes are refused.
pub(crate) fn parse_url(url: &str) -> anyhow::Result<Target> {
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

/// A connection to `target` with the GET sent, its reads and writes bounded by what is
/// left of `deadline` since `started`.
pub(crate) fn send_get(
    target: &Target,
    agent: &str,
    started: Instant,
    deadline: Duration,
) -> anyhow::Result<TcpStream> {
    // `to_socket_addrs` takes `host:port` and `[v6]:port` as URLs write them.
    let addresses: Vec<SocketAddr> = target
        .authority
        .to_socket_addrs()
        .with_context(|| format!("resolving {}", target.authority))?
        .collect();
    let mut last_error = None;
    let mut stream = None;
    for address in addresses {
        match TcpStream::connect_timeout(&address, deadline) {
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
    let remaining = deadline
        .checked_sub(started.elapsed())
        .filter(|d| !d.is_zero())
        .context("timed out connecting")?;
    stream.set_read_timeout(Some(remaining))?;
    stream.set_write_timeout(Some(remaining))?;
    let request = format!(
        "GET {} HTTP/1.0\r\nHost: {}\r\nUser-Agent: {agent}\r\n\r\n",
        target.path, target.authority
    );
    stream
        .write_all(request.as_bytes())
        .context("sending the request")?;
    Ok(stream)
}

/// A whole answer to a GET.
#[derive(Debug)]
pub(crate) struct Answer {
    /// The status line, e.g. `HTTP/1.1 200 OK`.
    pub(crate) status_line: String,
    pub(crate) status: u16,
    /// The body, de-chunked.
    pub(crate) body: Vec<u8>,
}

impl Answer {
    /// The body of a 200 answer as text.
    pub(crate) fn ok_text(self) -> anyhow::Result<String> {
        if self.status != 200 {
            bail!("the server answered {:?}", self.status_line);
        }
        String::from_utf8(self.body).context("the answer is not UTF-8 text")
    }
}

/// `GET url` (see [`parse_url`]), the whole answer read within `deadline`, its body at
/// most `max_body_bytes`.
pub(crate) fn get(
    url: &str,
    agent: &str,
    deadline: Duration,
    max_body_bytes: u64,
) -> anyhow::Result<Answer> {
    let target = parse_url(url)?;
    let started = Instant::now();
    let mut stream = send_get(&target, agent, started, deadline)?;
    // HTTP/1.0: the server closes the connection after the body.
    let limit = max_body_bytes.saturating_add(MAX_HEAD_BYTES as u64);
    let mut answer = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        if started.elapsed() > deadline {
            bail!("no complete answer within {deadline:?}");
        }
        let n = stream.read(&mut chunk).context("reading the answer")?;
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&chunk[..n]);
        if answer.len() as u64 > limit {
            bail!("the answer is larger than {max_body_bytes} bytes");
        }
    }
    parse_answer(&answer)
}

/// The status line and headers of an answer: far below this.
pub(crate) const MAX_HEAD_BYTES: usize = 16 * 1024;

/// The code of an `HTTP/1.x NNN reason` status line (the first line of `head`).
pub(crate) fn status_code(head: &[u8]) -> anyhow::Result<u16> {
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

/// A complete HTTP/1 answer: its status and body (identity or chunked).
fn parse_answer(answer: &[u8]) -> anyhow::Result<Answer> {
    let head_end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("the answer has no end of headers")?;
    let status = status_code(answer)?;
    let head = String::from_utf8_lossy(&answer[..head_end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default().to_owned();
    let chunked = lines.any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("transfer-encoding")
                && value.to_ascii_lowercase().contains("chunked")
        })
    });
    let body = &answer[head_end + 4..];
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_vec()
    };
    Ok(Answer {
        status_line,
        status,
        body,
    })
}

fn dechunk(mut body: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .context("a chunk without a size line")?;
        let size_text = String::from_utf8_lossy(&body[..line_end]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .with_context(|| format!("a chunk size that is not hex: {size_text:?}"))?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if body.len() < size + 2 {
            bail!("a chunk longer than the answer");
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(answer: &[u8]) -> anyhow::Result<String> {
        parse_answer(answer)?.ok_text()
    }

    #[test]
    fn bodies_of_plain_and_chunked_answers() {
        let plain = b"HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\na 1\n";
        assert_eq!(text(plain).unwrap(), "a 1\n");
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\na 1\n\r\n4\r\nb 2\n\r\n0\r\n\r\n";
        assert_eq!(text(chunked).unwrap(), "a 1\nb 2\n");
        let missing = b"HTTP/1.0 404 Not Found\r\n\r\n";
        assert!(text(missing).unwrap_err().to_string().contains("404"));
        let short = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nff\r\nab";
        assert!(text(short).is_err());
        assert!(text(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
    }

    #[test]
    fn urls_name_a_host_a_port_and_a_path() {
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

    #[test]
    fn an_answer_past_the_cap_is_refused() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = [0u8; 1024];
            let _ = stream.read(&mut request).unwrap();
            let _ = stream.write_all(b"HTTP/1.0 200 OK\r\n\r\n");
            let _ = stream.write_all(&vec![b'x'; 200_000]);
        });
        let err = get(
            &format!("http://{address}/consumers"),
            "test",
            Duration::from_secs(5),
            1000,
        )
        .unwrap_err();
        assert!(err.to_string().contains("larger than 1000"), "{err:#}");
        server.join().unwrap();
    }
}
