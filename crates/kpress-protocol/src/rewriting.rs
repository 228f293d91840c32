//! What every response rewrite shares: the [`ResponseObserver`] the proxy answers
//! through, the address replacement, and guarded decoding and encoding of
//! kafka-protocol messages, and the whole frame of a request kpress sends itself.

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::RequestHeader;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

use crate::error::{malformed_response, ProtocolError, WireError};
use crate::frame::SIZE_PREFIX_LEN;

/// What the proxy learns from, and decides for, the responses kpress rewrites.
pub trait ResponseObserver {
    /// The broker advertised node `node_id` at `host:port`; returns the
    /// address clients must use instead (that node's kpress listener).
    fn broker(&mut self, node_id: i32, host: &str, port: i32) -> (String, i32);

    /// A Metadata response named topic `id`.
    fn topic(&mut self, id: [u8; 16], name: &str);

    /// A Metadata response answered for topic `name` without error: a topic the
    /// cluster has, in any version (clients before v10 see no topic ids).
    fn named_topic(&mut self, name: &str) {
        let _ = name;
    }

    /// The highest version of `api_key` the relayed ApiVersions response
    /// advertises, given what the broker and kpress support
    /// (`min(broker_max, kpress_max)`). Override to cap lower, e.g. Produce
    /// at v12 so clients send topic names instead of ids.
    fn max_version(&mut self, api_key: i16, capped_max: i16) -> i16 {
        let _ = api_key;
        capped_max
    }
}

/// Replaces the address of broker `node_id` by the one `observer` hands out.
pub(crate) fn replace_address(
    observer: &mut dyn ResponseObserver,
    node_id: i32,
    host: &mut StrBytes,
    port: &mut i32,
) {
    let (new_host, new_port) = observer.broker(node_id, host.as_str(), *port);
    *host = StrBytes::from_string(new_host);
    *port = new_port;
}

/// Decodes a response body with kafka-protocol once `guard` (a bounds-checked
/// walk of the same body) has proven every count fits in the bytes present:
/// kafka-protocol sizes vectors from wire counts.
pub(crate) fn guarded_decode<T: Decodable>(
    api: &'static str,
    version: i16,
    body: &[u8],
    guard: impl FnOnce(&[u8], i16) -> Result<(), WireError>,
) -> Result<T, ProtocolError> {
    let malformed = malformed_response(api, version);
    guard(body, version).map_err(&malformed)?;
    let mut buf = body;
    T::decode(&mut buf, version).map_err(|e| malformed(WireError::Decode(e.to_string())))
}

pub(crate) fn encode_failed<E: std::fmt::Display>(
    api: &'static str,
    version: i16,
) -> impl Fn(E) -> ProtocolError {
    move |e| ProtocolError::Encode {
        api,
        version,
        reason: e.to_string(),
    }
}

pub(crate) fn encode<T: Encodable>(
    api: &'static str,
    version: i16,
    message: &T,
) -> Result<BytesMut, ProtocolError> {
    let mut out = BytesMut::new();
    message
        .encode(&mut out, version)
        .map_err(encode_failed(api, version))?;
    Ok(out)
}

/// The whole frame (size prefix, header, body) of `request` at `version` under
/// `api_key`, with `correlation_id` and `client_id` in its header. The caller has
/// checked `version`.
pub(crate) fn encode_request_frame<T: Encodable + HeaderVersion>(
    api: &'static str,
    api_key: i16,
    version: i16,
    correlation_id: i32,
    client_id: &str,
    request: &T,
) -> Result<BytesMut, ProtocolError> {
    let header = RequestHeader::default()
        .with_request_api_key(api_key)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_string(client_id.to_owned())));
    let encode_error = encode_failed(api, version);
    let mut frame = BytesMut::new();
    frame.put_i32(0); // size, fixed up below
    header
        .encode(&mut frame, T::header_version(version))
        .map_err(&encode_error)?;
    request.encode(&mut frame, version).map_err(&encode_error)?;
    let size = i32::try_from(frame.len() - SIZE_PREFIX_LEN).map_err(|_| ProtocolError::Encode {
        api,
        version,
        reason: format!("{} bytes do not fit a frame", frame.len()),
    })?;
    frame[..SIZE_PREFIX_LEN].copy_from_slice(&size.to_be_bytes());
    Ok(frame)
}
