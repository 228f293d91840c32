//! Reading kpress's metrics page: over plain HTTP (`http://host:port/path`, one
//! HTTP/1.0 GET with a deadline and a size cap), or from a saved page (`file://` URL or
//! a path).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// What one fetch may take in all.
const DEADLINE: Duration = Duration::from_secs(10);
/// A page larger than this is refused: kpress bounds its topic labels, so its page is
/// far smaller even with thousands of long topic names.
pub(crate) const MAX_PAGE_BYTES: u64 = 64 * 1024 * 1024;

/// The text of the page at `source`.
pub(crate) fn read(source: &str) -> anyhow::Result<String> {
    if let Some(rest) = source.strip_prefix("http://") {
        return get(rest).with_context(|| format!("GET {source}"));
    }
    if source.contains("://") && !source.starts_with("file://") {
        bail!("{source}: only http:// URLs, file:// URLs and paths are read");
    }
    let path = source.strip_prefix("file://").unwrap_or(source);
    let file = std::fs::File::open(path).with_context(|| format!("opening {path}"))?;
    let mut page = Vec::new();
    file.take(MAX_PAGE_BYTES + 1)
        .read_to_end(&mut page)
        .with_context(|| format!("reading {path}"))?;
    if page.len() as u64 > MAX_PAGE_BYTES {
        bail!("{path}: larger than {MAX_PAGE_BYTES} bytes, not a kpress metrics page");
    }
    String::from_utf8(page).with_context(|| format!("{path}: not UTF-8 text"))
}

/// `GET /path` from `authority/path` (the URL after `http://`), the body of a 200
/// answer.
fn get(url: &str) -> anyhow::Result<String> {
    let (authority, path) = match url.find('/') {
        Some(slash) => (&url[..slash], &url[slash..]),
        None => (url, "/"),
    };
    if authority.is_empty() || authority.contains('@') {
        bail!("the URL needs a host:port and no credentials");
    }
    if path.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        bail!("the path has a space or a control character");
    }
    let started = Instant::now();
    let addresses: Vec<SocketAddr> = authority
        .to_socket_addrs()
        .with_context(|| format!("resolving {authority} (host:port)"))?
        .collect();
    let mut last_error = None;
    let mut stream = None;
    for address in addresses {
        match TcpStream::connect_timeout(&address, DEADLINE) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(err) => last_error = Some(format!("connecting to {address}: {err}")),
        }
    }
    let Some(mut stream) = stream else {
        bail!(last_error.unwrap_or_else(|| "no address to connect to".into()));
    };
    stream.set_read_timeout(Some(DEADLINE))?;
    stream.set_write_timeout(Some(DEADLINE))?;
    let request = format!(
        "GET {path} HTTP/1.0\r\nHost: {authority}\r\nUser-Agent: kpress-advise\r\nAccept: text/plain\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).context("sending")?;
    // HTTP/1.0: the server closes the connection after the body.
    let mut answer = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        if started.elapsed() > DEADLINE {
            bail!("no complete answer within {DEADLINE:?}");
        }
        let n = stream.read(&mut chunk).context("reading the answer")?;
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&chunk[..n]);
        if answer.len() as u64 > MAX_PAGE_BYTES + 64 * 1024 {
            bail!("the answer is larger than {MAX_PAGE_BYTES} bytes");
        }
    }
    body_of(&answer)
}

/// The body of a complete HTTP/1 answer with status 200 (identity or chunked).
fn body_of(answer: &[u8]) -> anyhow::Result<String> {
    let head_end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("the answer has no end of headers")?;
    let head = String::from_utf8_lossy(&answer[..head_end]);
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    let mut parts = status.splitn(3, ' ');
    if !parts.next().unwrap_or_default().starts_with("HTTP/1.") {
        bail!("not an HTTP/1 answer: {status:?}");
    }
    if parts.next() != Some("200") {
        bail!("the server answered {status:?}");
    }
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
    String::from_utf8(body).context("the page is not UTF-8 text")
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

    #[test]
    fn bodies_of_plain_and_chunked_answers() {
        let plain = b"HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\na 1\n";
        assert_eq!(body_of(plain).unwrap(), "a 1\n");
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\na 1\n\r\n4\r\nb 2\n\r\n0\r\n\r\n";
        assert_eq!(body_of(chunked).unwrap(), "a 1\nb 2\n");
        let missing = b"HTTP/1.0 404 Not Found\r\n\r\n";
        assert!(body_of(missing).unwrap_err().to_string().contains("404"));
        let short = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nff\r\nab";
        assert!(body_of(short).is_err());
    }

    #[test]
    fn gets_a_page_from_a_server() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = [0u8; 1024];
            let n = stream.read(&mut request).unwrap();
            let request = String::from_utf8_lossy(&request[..n]).into_owned();
            stream
                .write_all(b"HTTP/1.0 200 OK\r\n\r\nkpress_connections_open 1\n")
                .unwrap();
            request
        });
        let page = read(&format!("http://{address}/metrics")).unwrap();
        assert_eq!(page, "kpress_connections_open 1\n");
        assert!(server
            .join()
            .unwrap()
            .starts_with("GET /metrics HTTP/1.0\r\n"));
    }

    #[test]
    fn refuses_other_schemes_and_missing_files() {
        assert!(read("https://x:1/metrics").is_err());
        assert!(read("/nonexistent/kpress-metrics.txt").is_err());
    }
}
