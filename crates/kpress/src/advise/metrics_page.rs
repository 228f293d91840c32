//! Reading kpress's metrics page: over plain HTTP (`http://host:port/path`, one
//! HTTP/1.0 GET with a deadline and a size cap, [`crate::plain_http`]), or from a saved
//! page (`file://` URL or a path).

use std::io::Read;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::plain_http;

/// What one fetch may take in all.
const DEADLINE: Duration = Duration::from_secs(10);
/// A page larger than this is refused: kpress bounds its topic labels, so its page is
/// far smaller even with thousands of long topic names.
pub(crate) const MAX_PAGE_BYTES: u64 = 64 * 1024 * 1024;

/// The text of the page at `source`.
pub(crate) fn read(source: &str) -> anyhow::Result<String> {
    if source.starts_with("http://") {
        return plain_http::get(source, "kpress-advise", DEADLINE, MAX_PAGE_BYTES)
            .and_then(plain_http::Answer::ok_text)
            .with_context(|| format!("GET {source}"));
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

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
