//! kpress's own requests as kafka-protocol types: the whole frame of a request, and its
//! response decoded only once a bounds-checked walk of the body has proven every count
//! fits in the bytes present (kafka-protocol sizes vectors from wire counts, so a
//! broker's hostile count would otherwise be an allocation).

use bytes::BytesMut;
use kafka_protocol::protocol::Request;

use crate::error::{check_version, ProtocolError};
use crate::rewriting::{encode_request_frame, guarded_decode};

/// A response kpress decodes as its kafka-protocol type, in the versions its guard
/// walks. Implemented here only, for each response kpress has a walk of.
pub trait GuardedResponse: sealed::Guarded {}

impl<T: sealed::Guarded> GuardedResponse for T {}

pub(crate) mod sealed {
    use kafka_protocol::protocol::Decodable;

    use crate::api::Versions;
    use crate::error::WireError;

    pub trait Guarded: Decodable {
        /// The API's name, for errors.
        const API: &'static str;
        /// The versions [`Guarded::guard`] walks.
        const VERSIONS: Versions;

        /// The version a response `body` answering a request of `version` is encoded in.
        fn body_version(version: i16, body: &[u8]) -> i16 {
            let _ = body;
            version
        }

        /// Checks every length and count of `body` against the bytes present.
        fn guard(body: &[u8], version: i16) -> Result<(), WireError>;
    }
}

/// The whole frame (size prefix, header, body) of `request` at `version`, with
/// `correlation_id` and `client_id` in its header. Only a version whose response kpress
/// reads is encoded.
pub fn request_frame<R>(
    request: &R,
    version: i16,
    correlation_id: i32,
    client_id: &str,
) -> Result<BytesMut, ProtocolError>
where
    R: Request,
    R::Response: GuardedResponse,
{
    let api = <R::Response as sealed::Guarded>::API;
    let versions = <R::Response as sealed::Guarded>::VERSIONS;
    check_version(api, version, versions.min, versions.max)?;
    encode_request_frame(api, R::KEY, version, correlation_id, client_id, request)
}

/// The response `body` (after its response header) answering a request of `version`,
/// decoded once its walk has checked every count.
pub fn decode_response<T: GuardedResponse>(version: i16, body: &[u8]) -> Result<T, ProtocolError> {
    let version = T::body_version(version, body);
    check_version(T::API, version, T::VERSIONS.min, T::VERSIONS.max)?;
    guarded_decode(T::API, version, body, T::guard)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse, RequestHeader};
    use kafka_protocol::protocol::{Decodable, HeaderVersion};

    use super::*;
    use crate::frame::SIZE_PREFIX_LEN;
    use crate::{api_key, error_code};

    #[test]
    fn the_frame_holds_the_header_and_the_body() {
        let frame = request_frame(&ApiVersionsRequest::default(), 0, -9, "kpress").unwrap();
        let size = i32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(size, frame.len() - SIZE_PREFIX_LEN);
        let mut payload = Bytes::copy_from_slice(&frame[SIZE_PREFIX_LEN..]);
        let header =
            RequestHeader::decode(&mut payload, ApiVersionsRequest::header_version(0)).unwrap();
        assert_eq!(header.request_api_key, api_key::API_VERSIONS);
        assert_eq!(header.correlation_id, -9);
        assert_eq!(header.client_id.as_deref(), Some("kpress"));
        assert!(payload.is_empty(), "v0 has no body fields");
        // A version whose answer kpress does not read is not sent.
        assert!(request_frame(&ApiVersionsRequest::default(), 5, 1, "kpress").is_err());
    }

    #[test]
    fn hostile_counts_are_refused_before_decoding() {
        // ApiVersions v0: error_code, then an api_keys count far past the body.
        let mut body = 0i16.to_be_bytes().to_vec();
        body.extend_from_slice(&i32::MAX.to_be_bytes());
        assert!(decode_response::<ApiVersionsResponse>(0, &body).is_err());
        // The count that fits decodes.
        let mut body = 0i16.to_be_bytes().to_vec();
        body.extend_from_slice(&1i32.to_be_bytes());
        body.extend_from_slice(&[0, 18, 0, 0, 0, 4]);
        let response = decode_response::<ApiVersionsResponse>(0, &body).unwrap();
        assert_eq!(response.api_keys.len(), 1);
        // A broker refusing the version answers in v0's body, whatever was asked.
        let mut refusal = error_code::UNSUPPORTED_VERSION.to_be_bytes().to_vec();
        refusal.extend_from_slice(&0i32.to_be_bytes());
        let response = decode_response::<ApiVersionsResponse>(3, &refusal).unwrap();
        assert_eq!(response.error_code, error_code::UNSUPPORTED_VERSION);
    }
}
