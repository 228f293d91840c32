//! ApiVersions responses: the broker's list relayed, with the max version of
//! every API kpress parses capped to what kpress (and kafka-protocol 0.18)
//! supports. Min versions stay as the broker says: librdkafka turns
//! compression off when it cannot see old Produce versions.

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::ApiVersionsResponse;

use crate::error::{check_version, ProtocolError, WireError};
use crate::frame::SIZE_PREFIX_LEN;
use crate::rewriting::{encode, guarded_decode, ResponseObserver};
use crate::wire::{LengthPrefix, Reader};
use crate::{api, api_key, error_code};

const API: &str = "ApiVersions";
pub(crate) const API_VERSIONS_MIN_VERSION: i16 = api::parsed(api_key::API_VERSIONS).min;
/// The newest ApiVersions version kpress parses. A client asking for a newer
/// one gets kpress's own answer ([`answer_unsupported_api_versions`]).
pub const API_VERSIONS_MAX_VERSION: i16 = api::parsed(api_key::API_VERSIONS).max;
const FIRST_FLEXIBLE: i16 = api::first_flexible(api_key::API_VERSIONS);
/// The highest version kpress parses, per API key it parses (from [`crate::api`]).
pub const PARSED_MAX_VERSIONS: [(i16, i16); 8] = api::PARSED_MAX_VERSIONS;

/// The version an ApiVersions response body is actually encoded in: a broker
/// that does not support the requested version answers UNSUPPORTED_VERSION in
/// the v0 format (its list then says which versions it does support).
pub fn api_versions_body_version(api_version: i16, body: &[u8]) -> i16 {
    match body {
        [hi, lo, ..] if i16::from_be_bytes([*hi, *lo]) == error_code::UNSUPPORTED_VERSION => 0,
        _ => api_version,
    }
}

/// The first ApiVersions version whose request names the client's software (KIP-511).
const FIRST_VERSION_WITH_CLIENT_SOFTWARE: i16 = 3;

/// The `client_software_name` and `client_software_version` of an ApiVersions request
/// at `api_version`, from its `body` (after the request header), as sent: unchecked and
/// unbounded slices of `body` (the broker validates them; a caller bounds what it
/// keeps). `None` before v3 (no such fields), past [`API_VERSIONS_MAX_VERSION`], or when
/// the body does not parse.
pub fn api_versions_client_software(api_version: i16, body: &[u8]) -> Option<(&[u8], &[u8])> {
    if !(FIRST_VERSION_WITH_CLIENT_SOFTWARE..=API_VERSIONS_MAX_VERSION).contains(&api_version) {
        return None;
    }
    let mut reader = Reader::new(body);
    let name = reader.length_prefixed(LengthPrefix::Compact).ok()??;
    let version = reader.length_prefixed(LengthPrefix::Compact).ok()??;
    Some((name, version))
}

/// kpress's own answer to an ApiVersions request newer than
/// [`API_VERSIONS_MAX_VERSION`]; `None` for every other request (forward it).
///
/// Such a request is not forwarded: a broker that knows the version would
/// answer in a format kpress cannot parse. kpress answers the way a broker
/// answers a version it does not know (KIP-511): UNSUPPORTED_VERSION in the
/// v0 body format with response header v0, listing the ApiVersions versions
/// kpress parses, so that the client retries with one of them. Returns the
/// whole frame, size prefix included, ready to write to the client.
pub fn answer_unsupported_api_versions(
    api_key: i16,
    api_version: i16,
    correlation_id: i32,
) -> Option<BytesMut> {
    if api_key != api_key::API_VERSIONS || api_version <= API_VERSIONS_MAX_VERSION {
        return None;
    }
    // v0 body: error_code, then api_keys as a classic array of
    // (api_key, min_version, max_version); no throttle_time_ms before v1.
    const BODY_LEN: usize = 2 + 4 + 2 + 2 + 2;
    const PAYLOAD_LEN: usize = 4 + BODY_LEN;
    let mut frame = BytesMut::with_capacity(SIZE_PREFIX_LEN + PAYLOAD_LEN);
    frame.put_i32(PAYLOAD_LEN as i32);
    frame.put_i32(correlation_id); // response header v0
    frame.put_i16(error_code::UNSUPPORTED_VERSION);
    frame.put_i32(1);
    frame.put_i16(api_key::API_VERSIONS);
    frame.put_i16(API_VERSIONS_MIN_VERSION);
    frame.put_i16(API_VERSIONS_MAX_VERSION);
    Some(frame)
}

pub(crate) fn rewrite_api_versions_response(
    api_version: i16,
    body: &[u8],
    observer: &mut dyn ResponseObserver,
) -> Result<Option<BytesMut>, ProtocolError> {
    let version = api_versions_body_version(api_version, body);
    check_version(
        API,
        version,
        API_VERSIONS_MIN_VERSION,
        API_VERSIONS_MAX_VERSION,
    )?;
    let mut response: ApiVersionsResponse =
        guarded_decode(API, version, body, walk_api_versions_response)?;
    let mut changed = false;
    for api in &mut response.api_keys {
        let parsed_max = PARSED_MAX_VERSIONS
            .iter()
            .find(|(key, _)| *key == api.api_key)
            .map_or(api.max_version, |(_, max)| *max);
        let capped = api.max_version.min(parsed_max);
        // Never below the broker's min: an empty range would hide the API.
        let max = observer
            .max_version(api.api_key, capped)
            .min(capped)
            .max(api.min_version);
        if max != api.max_version {
            api.max_version = max;
            changed = true;
        }
    }
    if !changed {
        return Ok(None);
    }
    encode(API, version, &response).map(Some)
}

impl crate::typed::sealed::Guarded for ApiVersionsResponse {
    const API: &'static str = API;
    const VERSIONS: api::Versions = api::parsed(api_key::API_VERSIONS);

    fn body_version(version: i16, body: &[u8]) -> i16 {
        api_versions_body_version(version, body)
    }

    fn guard(body: &[u8], version: i16) -> Result<(), WireError> {
        walk_api_versions_response(body, version)
    }
}

/// Bounds-checked walk of an ApiVersions response, known tagged fields
/// included (kafka-protocol decodes their arrays too): the guard before decoding.
fn walk_api_versions_response(body: &[u8], v: i16) -> Result<(), WireError> {
    let flex = v >= FIRST_FLEXIBLE;
    let mut r = Reader::new(body);
    r.i16()?; // error_code
    let min_api = if flex { 7 } else { 6 };
    let apis = r.required_count(flex, min_api, "api_keys")?;
    for _ in 0..apis {
        r.skip(6)?; // api_key, min_version, max_version
        if flex {
            r.skip_tagged_fields()?;
        }
    }
    if v >= 1 {
        r.i32()?; // throttle_time_ms
    }
    if flex {
        let mut tag_error = Ok(());
        r.tagged_fields(|field| {
            if tag_error.is_err() {
                return;
            }
            // kafka-protocol reads a known tag's value by its type, whatever size
            // the tag declares: a size that disagrees would send it reading the
            // next bytes as another field (and sizing vectors from them).
            tag_error = match field.tag {
                // supported_features (0) and finalized_features (2): arrays of
                // {name, i16, i16, tagged fields}.
                0 | 2 => walk_features(field.content).map_err(|e| e.shifted(field.content_start)),
                // finalized_features_epoch: int64.
                1 => exact_size(field.content, 8, field.content_start),
                // zk_migration_ready: bool.
                3 => exact_size(field.content, 1, field.content_start),
                _ => Ok(()),
            };
        })?;
        tag_error?;
    }
    r.finish()
}

/// A fixed-size tagged field's content must be exactly `size` bytes.
fn exact_size(content: &[u8], size: usize, at: usize) -> Result<(), WireError> {
    let mut r = Reader::new(content);
    r.skip(size).map_err(|e| e.shifted(at))?;
    r.finish().map_err(|e| e.shifted(at))
}

fn walk_features(content: &[u8]) -> Result<(), WireError> {
    let mut r = Reader::new(content);
    let features = r.required_count(true, 1 + 4 + 1, "features")?;
    for _ in 0..features {
        r.skip_string(true)?;
        r.skip(4)?;
        r.skip_tagged_fields()?;
    }
    r.finish()
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::ResponseHeader;
    use kafka_protocol::protocol::Decodable;

    use super::*;

    /// What a Kafka 4.1.1 broker sent for ApiVersions v5, v7 and v127 with
    /// correlation id 0x01020304: size 16, correlation id, error 35, one
    /// api_keys entry (18, 0, 4).
    const KAFKA_4_1_REFUSAL: [u8; 20] = [
        0, 0, 0, 16, 1, 2, 3, 4, 0, 35, 0, 0, 0, 1, 0, 18, 0, 0, 0, 4,
    ];

    #[test]
    fn client_software_is_read_from_v3_on_and_hostile_lengths_fail() {
        use kafka_protocol::messages::ApiVersionsRequest;
        use kafka_protocol::protocol::{Encodable, StrBytes};

        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("librdkafka"))
            .with_client_software_version(StrBytes::from_static_str("2.3.0"));
        for version in 3..=API_VERSIONS_MAX_VERSION {
            let mut body = BytesMut::new();
            request.encode(&mut body, version).unwrap();
            assert_eq!(
                api_versions_client_software(version, &body),
                Some((&b"librdkafka"[..], &b"2.3.0"[..])),
                "v{version}"
            );
        }
        let mut v2 = BytesMut::new();
        request.encode(&mut v2, 2).unwrap();
        assert_eq!(api_versions_client_software(2, &v2), None);
        assert_eq!(
            api_versions_client_software(API_VERSIONS_MAX_VERSION + 1, b""),
            None
        );
        // A name length far past the body, and a null name.
        assert_eq!(
            api_versions_client_software(3, &[0xff, 0xff, 0xff, 0x0f, 1]),
            None
        );
        assert_eq!(api_versions_client_software(3, &[0, 1, 0]), None);
    }

    #[test]
    fn newer_api_versions_get_what_a_broker_answers() {
        for version in [API_VERSIONS_MAX_VERSION + 1, 7, 127, i16::MAX] {
            let frame =
                answer_unsupported_api_versions(api_key::API_VERSIONS, version, 0x0102_0304)
                    .expect("answered by kpress");
            assert_eq!(frame[..], KAFKA_4_1_REFUSAL, "v{version}");
        }
    }

    #[test]
    fn refusal_decodes_as_api_versions_v0_listing_what_kpress_parses() {
        let frame = answer_unsupported_api_versions(api_key::API_VERSIONS, 9, -42).unwrap();
        let size = i32::from_be_bytes(frame[..4].try_into().unwrap());
        assert_eq!(size as usize, frame.len() - SIZE_PREFIX_LEN);
        let mut payload = Bytes::copy_from_slice(&frame[SIZE_PREFIX_LEN..]);
        let header = ResponseHeader::decode(&mut payload, 0).unwrap();
        assert_eq!(header.correlation_id, -42);
        let body = payload.clone();
        let response = ApiVersionsResponse::decode(&mut payload, 0).unwrap();
        assert!(payload.is_empty(), "trailing bytes");
        assert_eq!(response.error_code, error_code::UNSUPPORTED_VERSION);
        assert_eq!(
            response.api_keys,
            vec![ApiVersion::default()
                .with_api_key(api_key::API_VERSIONS)
                .with_min_version(API_VERSIONS_MIN_VERSION)
                .with_max_version(API_VERSIONS_MAX_VERSION)]
        );
        // Read as the answer to the version the client asked for.
        assert_eq!(api_versions_body_version(9, &body), 0);
    }

    #[test]
    fn every_other_request_is_forwarded() {
        for version in API_VERSIONS_MIN_VERSION..=API_VERSIONS_MAX_VERSION {
            assert_eq!(
                answer_unsupported_api_versions(api_key::API_VERSIONS, version, 1),
                None
            );
        }
        assert_eq!(
            answer_unsupported_api_versions(api_key::API_VERSIONS, -1, 1),
            None
        );
        for key in [api_key::PRODUCE, api_key::METADATA, api_key::SASL_HANDSHAKE] {
            assert_eq!(answer_unsupported_api_versions(key, 5, 1), None);
        }
    }
}
