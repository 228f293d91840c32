//! Kafka's size-prefixed framing and the request/response header fields a proxy needs
//! to route a frame without decoding its body.
//!
//! Every Kafka message is `int32 size` followed by `size` bytes. A request starts with
//! `api_key: i16, api_version: i16, correlation_id: i32`, then (header v1+) a nullable
//! client id and (header v2, the API's flexible versions) tagged fields. A response
//! starts with the correlation id, then tagged fields when the request's API version is
//! flexible (header v1), except ApiVersions, whose response header is always v0 so that
//! a client can read it before it knows what the broker supports.

use crate::api_key;
use crate::error::WireError;
use crate::wire::{LengthPrefix, Reader};

/// Bytes of the big-endian `int32` size in front of every frame.
pub const SIZE_PREFIX_LEN: usize = 4;

/// Why bytes could not be read as a Kafka frame or header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The size prefix is negative.
    #[error("frame size prefix is negative ({size})")]
    NegativeSize { size: i32 },
    /// The size prefix announces more than the configured maximum.
    #[error("frame of {size} bytes exceeds the {max}-byte limit (kpress's [limits] max_frame_bytes: raise it if frames this large are expected)")]
    TooLarge { size: usize, max: usize },
    /// A request or response header does not parse.
    #[error("malformed {what}: {source}")]
    Header {
        what: &'static str,
        #[source]
        source: WireError,
    },
}

/// Reads the body size announced by a frame's 4-byte prefix and checks it against `max`.
pub fn frame_body_len(prefix: [u8; SIZE_PREFIX_LEN], max: usize) -> Result<usize, FrameError> {
    let size = i32::from_be_bytes(prefix);
    let size = usize::try_from(size).map_err(|_| FrameError::NegativeSize { size })?;
    if size > max {
        return Err(FrameError::TooLarge { size, max });
    }
    Ok(size)
}

/// Checks whether `buf` starts with a whole frame of at most `max` body bytes.
///
/// `Ok(Some(n))`: the first `n` bytes of `buf` are one frame (prefix included).
/// `Ok(None)`: more bytes are needed. An error is returned as soon as the prefix is
/// readable and invalid, so a caller never buffers a frame it will refuse.
pub fn check_frame(buf: &[u8], max: usize) -> Result<Option<usize>, FrameError> {
    let Some(prefix) = buf.first_chunk::<SIZE_PREFIX_LEN>() else {
        return Ok(None);
    };
    let body_len = frame_body_len(*prefix, max)?;
    let frame_len = SIZE_PREFIX_LEN + body_len;
    Ok((buf.len() >= frame_len).then_some(frame_len))
}

/// The routing fields of a request header (the frame body without its size prefix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    /// Bytes of the whole header, where the request body starts. `None` when the API
    /// key is unknown to this build, so the header version cannot be known; such a
    /// request can still be relayed as bytes.
    pub header_len: Option<usize>,
}

/// Reads the routing fields of a request from its frame body (size prefix removed).
pub fn peek_request_header(body: &[u8]) -> Result<RequestHeader, FrameError> {
    let malformed = |source| FrameError::Header {
        what: "request header",
        source,
    };
    let mut reader = Reader::new(body);
    let api_key = reader.i16().map_err(malformed)?;
    let api_version = reader.i16().map_err(malformed)?;
    let correlation_id = reader.i32().map_err(malformed)?;
    let header_len = match is_flexible(api_key, api_version) {
        None => None,
        Some(flexible) => Some(request_header_len(reader, flexible).map_err(malformed)?),
    };
    Ok(RequestHeader {
        api_key,
        api_version,
        correlation_id,
        header_len,
    })
}

/// The client id in a request's header (the frame body without its size prefix), as
/// sent: an unbounded slice of `body`. `None` when it is null, when the header does not
/// parse, or for an API key this build does not know (its header version is unknown).
pub fn request_client_id(body: &[u8]) -> Option<&[u8]> {
    let mut reader = Reader::new(body);
    let api_key = reader.i16().ok()?;
    let api_version = reader.i16().ok()?;
    is_flexible(api_key, api_version)?;
    reader.i32().ok()?; // correlation_id
    reader.length_prefixed(LengthPrefix::Int16).ok()?
}

/// Header v1 (client id) or v2 (client id + tagged fields) after the fixed
/// fields: every API key this build knows uses at least v1 in every version a
/// current client sends.
fn request_header_len(mut reader: Reader<'_>, flexible: bool) -> Result<usize, WireError> {
    reader.length_prefixed(LengthPrefix::Int16)?; // client_id
    if flexible {
        reader.skip_tagged_fields()?;
    }
    Ok(reader.position())
}

/// Reads a response's correlation id (the first 4 bytes of its frame body).
pub fn response_correlation_id(body: &[u8]) -> Result<i32, FrameError> {
    Reader::new(body)
        .i32()
        .map_err(|source| FrameError::Header {
            what: "response header",
            source,
        })
}

/// Bytes of a response's header (where its body starts), given the API key and
/// version of the request it answers. `None` when the API key is unknown.
pub fn response_header_len(
    api_key: i16,
    api_version: i16,
    body: &[u8],
) -> Result<Option<usize>, FrameError> {
    let flexible = match is_flexible(api_key, api_version) {
        None => return response_correlation_id(body).map(|_| None),
        // ApiVersions answers with header v0 whatever the version (KIP-511).
        Some(flexible) => flexible && api_key != api_key::API_VERSIONS,
    };
    let mut reader = Reader::new(body);
    reader
        .i32()
        .and_then(|_| {
            if flexible {
                reader.skip_tagged_fields()?;
            }
            Ok(reader.position())
        })
        .map(Some)
        .map_err(|source| FrameError::Header {
            what: "response header",
            source,
        })
}

/// Whether `api_version` of `api_key` uses flexible (tagged-field) encoding, or `None`
/// for an API key this build does not know ([`crate::api`] holds the facts).
pub fn is_flexible(api_key: i16, api_version: i16) -> Option<bool> {
    crate::api::facts(api_key).map(|facts| facts.is_flexible(api_version))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(
        api_key: i16,
        version: i16,
        corr: i32,
        client_id: Option<&str>,
        tags: &[u8],
    ) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&api_key.to_be_bytes());
        out.extend_from_slice(&version.to_be_bytes());
        out.extend_from_slice(&corr.to_be_bytes());
        match client_id {
            None => out.extend_from_slice(&(-1i16).to_be_bytes()),
            Some(id) => {
                out.extend_from_slice(&(id.len() as i16).to_be_bytes());
                out.extend_from_slice(id.as_bytes());
            }
        }
        out.extend_from_slice(tags);
        out
    }

    #[test]
    fn frame_needs_prefix_and_body() {
        assert_eq!(check_frame(&[], 100), Ok(None));
        assert_eq!(check_frame(&[0, 0, 0], 100), Ok(None));
        assert_eq!(check_frame(&[0, 0, 0, 2, 9], 100), Ok(None));
        assert_eq!(check_frame(&[0, 0, 0, 2, 9, 9, 7], 100), Ok(Some(6)));
        assert_eq!(check_frame(&[0, 0, 0, 0], 100), Ok(Some(4)));
    }

    #[test]
    fn frame_refuses_negative_and_oversized_prefix_before_body() {
        assert_eq!(
            check_frame(&[0xff, 0xff, 0xff, 0xfe], 100),
            Err(FrameError::NegativeSize { size: -2 })
        );
        assert_eq!(
            check_frame(&[0, 0, 0, 101], 100),
            Err(FrameError::TooLarge {
                size: 101,
                max: 100
            })
        );
        assert_eq!(frame_body_len([0, 0, 0, 100], 100), Ok(100));
    }

    #[test]
    fn produce_v7_header_is_v1() {
        let body = request(api_key::PRODUCE, 7, 42, Some("rdkafka"), b"");
        let mut full = body.clone();
        full.extend_from_slice(b"BODY");
        let header = peek_request_header(&full).unwrap();
        assert_eq!(
            header,
            RequestHeader {
                api_key: api_key::PRODUCE,
                api_version: 7,
                correlation_id: 42,
                header_len: Some(body.len()),
            }
        );
    }

    #[test]
    fn produce_v9_header_is_v2_with_tagged_fields() {
        // Two tagged fields: tag 0 size 3, tag 1 size 0.
        let body = request(api_key::PRODUCE, 9, -5, None, &[2, 0, 3, 1, 2, 3, 1, 0]);
        let mut full = body.clone();
        full.extend_from_slice(&[0xaa; 10]);
        let header = peek_request_header(&full).unwrap();
        assert_eq!(header.correlation_id, -5);
        assert_eq!(header.header_len, Some(body.len()));
    }

    #[test]
    fn header_errors_are_reported_not_panicked() {
        let header_error = |body: &[u8]| match peek_request_header(body) {
            Err(FrameError::Header { source, .. }) => source,
            other => panic!("expected a header error, got {other:?}"),
        };
        assert!(matches!(
            header_error(&[0, 0, 0]),
            WireError::Truncated { .. }
        ));
        let mut bad = request(api_key::PRODUCE, 7, 1, None, b"");
        bad[8..10].copy_from_slice(&(-3i16).to_be_bytes());
        assert_eq!(
            header_error(&bad),
            WireError::NegativeLength { at: 8, length: -3 }
        );
        let mut short = request(api_key::PRODUCE, 7, 1, Some("abcdef"), b"");
        short.truncate(12);
        assert!(matches!(header_error(&short), WireError::Truncated { .. }));
        // Tagged field announcing more bytes than the frame holds.
        let over = request(api_key::METADATA, 12, 1, None, &[1, 0, 100]);
        assert!(matches!(header_error(&over), WireError::Truncated { .. }));
        let long_varint = request(
            api_key::METADATA,
            12,
            1,
            None,
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
        );
        assert_eq!(
            header_error(&long_varint),
            WireError::VarintTooLong { at: 10 }
        );
    }

    #[test]
    fn unknown_api_key_has_no_header_len() {
        let body = request(500, 0, 7, None, b"");
        let header = peek_request_header(&body).unwrap();
        assert_eq!(header.correlation_id, 7);
        assert_eq!(header.header_len, None);
        let negative = request(-1, 0, 7, None, b"");
        assert_eq!(peek_request_header(&negative).unwrap().header_len, None);
    }

    #[test]
    fn client_id_is_read_from_known_apis_only() {
        let body = request(0, 9, 1, Some("producer-1"), &[0]);
        assert_eq!(request_client_id(&body), Some(&b"producer-1"[..]));
        assert_eq!(request_client_id(&request(0, 7, 1, None, b"")), None);
        assert_eq!(request_client_id(&request(500, 0, 1, Some("x"), b"")), None);
        // A length past the body.
        let mut cut = request(0, 7, 1, Some("producer-1"), b"");
        cut.truncate(12);
        assert_eq!(request_client_id(&cut), None);
    }

    #[test]
    fn response_headers() {
        let mut resp = 77i32.to_be_bytes().to_vec();
        resp.push(0); // no tagged fields
        resp.extend_from_slice(b"rest");
        assert_eq!(response_correlation_id(&resp), Ok(77));
        assert_eq!(
            response_header_len(api_key::METADATA, 12, &resp),
            Ok(Some(5))
        );
        assert_eq!(
            response_header_len(api_key::METADATA, 8, &resp),
            Ok(Some(4))
        );
        // ApiVersions v3+ still answers with header v0.
        assert_eq!(
            response_header_len(api_key::API_VERSIONS, 3, &resp),
            Ok(Some(4))
        );
        assert_eq!(response_header_len(999, 0, &resp), Ok(None));
        assert!(response_header_len(api_key::METADATA, 12, &[0, 0]).is_err());
    }

    #[test]
    fn flexibility_table_matches_known_points() {
        assert_eq!(is_flexible(api_key::PRODUCE, 8), Some(false));
        assert_eq!(is_flexible(api_key::PRODUCE, 13), Some(true));
        assert_eq!(is_flexible(api_key::SASL_HANDSHAKE, 1), Some(false));
        assert_eq!(is_flexible(47, 0), Some(false));
        assert_eq!(is_flexible(api_key::DESCRIBE_CLUSTER, 0), Some(true));
        assert_eq!(is_flexible(92, 0), Some(true));
        assert_eq!(is_flexible(93, 0), None);
    }
}
