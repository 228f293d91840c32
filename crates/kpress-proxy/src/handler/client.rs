//! Who the client says it is: the software it names in ApiVersions v3+ (KIP-511), kept
//! per connection, and the `client.id` of each request's header. Both come from the
//! client, so kpress keeps bounded copies only.

use std::fmt;
use std::sync::Arc;

use kpress_protocol::frame::request_client_id;

/// The most bytes kept of a client's software name, and of its version. Kafka sets no
/// length; real clients send well under this (`apache-kafka-java` / `3.9.1`,
/// `confluent-kafka-python` / `2.6.1-rdkafka-2.6.1`).
pub const MAX_CLIENT_SOFTWARE_BYTES: usize = 64;

/// The most bytes kept of a request's `client.id`.
pub const MAX_CLIENT_ID_BYTES: usize = 256;

/// The software a client names in its ApiVersions v3+ request (KIP-511): name and
/// version, each non-empty, of the characters Kafka allows (`[a-zA-Z0-9._-]`) and cut to
/// [`MAX_CLIENT_SOFTWARE_BYTES`]. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ClientSoftware {
    name: Arc<str>,
    version: Arc<str>,
}

impl ClientSoftware {
    /// The bounded copy of what a client sent; `None` when either is empty or holds a
    /// character Kafka does not allow (the broker refuses such a request).
    pub fn new(name: &[u8], version: &[u8]) -> Option<ClientSoftware> {
        Some(ClientSoftware {
            name: software_field(name)?,
            version: software_field(version)?,
        })
    }

    /// The client library's name, e.g. `apache-kafka-java`, `librdkafka`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its version, e.g. `3.9.1`.
    pub fn version(&self) -> &str {
        &self.version
    }
}

impl fmt::Debug for ClientSoftware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for ClientSoftware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.name, self.version)
    }
}

fn software_field(bytes: &[u8]) -> Option<Arc<str>> {
    let allowed = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
    if bytes.is_empty() || !bytes.iter().all(allowed) {
        return None;
    }
    let kept = &bytes[..bytes.len().min(MAX_CLIENT_SOFTWARE_BYTES)];
    // ASCII only, so any cut is a char boundary.
    std::str::from_utf8(kept).ok().map(Arc::from)
}

/// The client ids of one connection's requests. A client sends the same one on every
/// request, so it is copied once and shared by the requests that repeat it.
#[derive(Debug, Default)]
pub(crate) struct ClientIds {
    last: Option<Arc<str>>,
}

impl ClientIds {
    /// The bounded client id of the request in `body` (a frame body without its size
    /// prefix): at most [`MAX_CLIENT_ID_BYTES`], cut at a char boundary, invalid UTF-8
    /// replaced. `None` when it is null or the API key is unknown.
    pub(crate) fn of(&mut self, body: &[u8]) -> Option<Arc<str>> {
        let raw = request_client_id(body)?;
        let raw = &raw[..raw.len().min(MAX_CLIENT_ID_BYTES)];
        if let Some(last) = &self.last {
            if last.as_bytes() == raw {
                return Some(Arc::clone(last));
            }
        }
        let id: Arc<str> = match std::str::from_utf8(raw) {
            Ok(id) => id.into(),
            // Cut inside a character: keep what comes before it.
            Err(err) if err.error_len().is_none() => {
                String::from_utf8_lossy(&raw[..err.valid_up_to()]).into()
            }
            Err(_) => String::from_utf8_lossy(raw).into(),
        };
        self.last = Some(Arc::clone(&id));
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn software_is_kept_bounded_and_only_as_kafka_allows() {
        let java = ClientSoftware::new(b"apache-kafka-java", b"3.9.1").unwrap();
        assert_eq!(
            (java.name(), java.version()),
            ("apache-kafka-java", "3.9.1")
        );
        assert_eq!(java.to_string(), "apache-kafka-java/3.9.1");
        let long = [b'a'; 10_000];
        let cut = ClientSoftware::new(&long, b"1_0").unwrap();
        assert_eq!(cut.name().len(), MAX_CLIENT_SOFTWARE_BYTES);
        assert_eq!(cut.version(), "1_0");
        assert_eq!(ClientSoftware::new(b"", b"1"), None);
        assert_eq!(ClientSoftware::new(b"kafka", b""), None);
        assert_eq!(ClientSoftware::new(b"bad name", b"1"), None);
        assert_eq!(ClientSoftware::new("caf\u{e9}".as_bytes(), b"1"), None);
    }

    fn header_v1(client_id: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&12i16.to_be_bytes()); // Heartbeat v3
        body.extend_from_slice(&3i16.to_be_bytes());
        body.extend_from_slice(&1i32.to_be_bytes());
        body.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
        body.extend_from_slice(client_id);
        body
    }

    #[test]
    fn client_ids_are_bounded_and_shared_while_repeated() {
        let mut ids = ClientIds::default();
        let first = ids.of(&header_v1(b"consumer-g-1")).unwrap();
        let again = ids.of(&header_v1(b"consumer-g-1")).unwrap();
        assert_eq!(&*first, "consumer-g-1");
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(&*ids.of(&header_v1(b"other")).unwrap(), "other");

        let long = vec![b'x'; 20_000];
        assert_eq!(
            ids.of(&header_v1(&long)).unwrap().len(),
            MAX_CLIENT_ID_BYTES
        );
        // A two-byte character across the cut is left out whole.
        let mut split = vec![b'x'; MAX_CLIENT_ID_BYTES - 1];
        split.extend_from_slice("\u{e9}".as_bytes());
        let id = ids.of(&header_v1(&split)).unwrap();
        assert_eq!(id.len(), MAX_CLIENT_ID_BYTES - 1);
        assert_eq!(&*ids.of(&header_v1(&[0xff, b'a'])).unwrap(), "\u{fffd}a");

        let mut null = header_v1(b"");
        null[8..10].copy_from_slice(&(-1i16).to_be_bytes());
        assert_eq!(ids.of(&null), None);
    }
}
