//! Produce responses in the classic layouts (v3-v8), for the records kpress produces
//! itself: a request of one partition's batches, and the response, its counts checked
//! against the bytes present before kafka-protocol sizes anything from them.

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::error::WireError;
use crate::wire::Reader;
use crate::{api, api_key};

const API: &str = "Produce";
/// The last Produce version without tagged fields; from v3 (the first with record
/// batches v2) kpress reads its own Produce answers up to it.
pub const PRODUCE_LAST_CLASSIC_VERSION: i16 = api::first_flexible(api_key::PRODUCE) - 1;

/// A Produce request of `records` (whole v2 batches) for `topic`-`partition`, with
/// `acks` and the broker's `timeout_ms`.
pub fn produce_request(
    topic: &str,
    partition: i32,
    records: Bytes,
    acks: i16,
    timeout_ms: i32,
) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(timeout_ms)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])])
}

impl crate::typed::sealed::Guarded for ProduceResponse {
    const API: &'static str = API;
    const VERSIONS: api::Versions = api::Versions {
        min: api::parsed(api_key::PRODUCE).min,
        max: PRODUCE_LAST_CLASSIC_VERSION,
    };

    fn guard(body: &[u8], version: i16) -> Result<(), WireError> {
        walk_produce_response(body, version)
    }
}

/// Bounds-checked walk of a classic Produce response (v3-v8).
fn walk_produce_response(body: &[u8], v: i16) -> Result<(), WireError> {
    let mut r = Reader::new(body);
    // index, error_code, base_offset, log_append_time_ms, v5+ log_start_offset,
    // v8+ record_errors and error_message
    let partition_min = 4 + 2 + 8 + 8 + if v >= 5 { 8 } else { 0 } + if v >= 8 { 4 + 2 } else { 0 };
    let topics = r.required_count(false, 2 + 4, "responses")?;
    for _ in 0..topics {
        r.skip_string(false)?; // name
        let partitions = r.required_count(false, partition_min, "partition_responses")?;
        for _ in 0..partitions {
            r.skip(4 + 2 + 8 + 8)?;
            if v >= 5 {
                r.skip(8)?; // log_start_offset
            }
            if v >= 8 {
                let errors = r.required_count(false, 4 + 2, "record_errors")?;
                for _ in 0..errors {
                    r.skip(4)?; // batch_index
                    r.skip_string(false)?; // batch_index_error_message
                }
                r.skip_string(false)?; // error_message
            }
        }
    }
    r.i32()?; // throttle_time_ms
    r.finish()
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::messages::produce_response::{
        BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
    };
    use kafka_protocol::messages::RequestHeader;
    use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};

    use super::*;
    use crate::frame::SIZE_PREFIX_LEN;
    use crate::{decode_response, request_frame};

    const FIRST: i16 = api::parsed(api_key::PRODUCE).min;

    fn encoded(version: i16) -> Vec<u8> {
        let response = ProduceResponse::default()
            .with_throttle_time_ms(3)
            .with_responses(vec![TopicProduceResponse::default()
                .with_name(TopicName(StrBytes::from_static_str("fleet")))
                .with_partition_responses(vec![
                    PartitionProduceResponse::default()
                        .with_index(0)
                        .with_base_offset(42),
                    PartitionProduceResponse::default()
                        .with_index(1)
                        .with_error_code(6)
                        .with_record_errors(if version >= 8 {
                            vec![BatchIndexAndErrorMessage::default()
                                .with_batch_index(0)
                                .with_batch_index_error_message(Some(StrBytes::from_static_str(
                                    "bad",
                                )))]
                        } else {
                            Vec::new()
                        })
                        .with_error_message(
                            (version >= 8).then(|| StrBytes::from_static_str("not the leader")),
                        ),
                ])]);
        let mut out = BytesMut::new();
        response.encode(&mut out, version).unwrap();
        out.to_vec()
    }

    #[test]
    fn every_classic_version_reads_back_and_cut_bodies_fail() {
        for version in FIRST..=PRODUCE_LAST_CLASSIC_VERSION {
            let body = encoded(version);
            let response: ProduceResponse = decode_response(version, &body).unwrap();
            let partitions = &response.responses[0].partition_responses;
            assert_eq!(partitions[0].base_offset, 42, "v{version}");
            assert_eq!(partitions[1].error_code, 6, "v{version}");
            for cut in 0..body.len() {
                assert!(
                    decode_response::<ProduceResponse>(version, &body[..cut]).is_err(),
                    "v{version} cut at {cut}"
                );
            }
            let mut longer = body.clone();
            longer.push(0);
            assert!(decode_response::<ProduceResponse>(version, &longer).is_err());
        }
    }

    #[test]
    fn hostile_counts_fail_before_anything_is_sized() {
        let topics = [0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0];
        assert!(decode_response::<ProduceResponse>(8, &topics).is_err());
        // One topic "t" claiming i32::MAX partitions.
        let partitions = [0, 0, 0, 1, 0, 1, b't', 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0];
        assert!(decode_response::<ProduceResponse>(3, &partitions).is_err());
    }

    #[test]
    fn the_request_carries_the_batches_as_given() {
        let batches = Bytes::from_static(b"whole batches");
        let request = produce_request("fleet", 0, batches.clone(), -1, 5000);
        for version in FIRST..=PRODUCE_LAST_CLASSIC_VERSION {
            let frame = request_frame(&request, version, -5, "kpress").unwrap();
            let mut payload = Bytes::copy_from_slice(&frame[SIZE_PREFIX_LEN..]);
            RequestHeader::decode(&mut payload, ProduceRequest::header_version(version)).unwrap();
            let decoded = ProduceRequest::decode(&mut payload, version).unwrap();
            assert!(payload.is_empty(), "v{version}: trailing bytes");
            assert_eq!(decoded.acks, -1);
            let data = &decoded.topic_data[0].partition_data[0];
            assert_eq!(data.records.as_ref(), Some(&batches));
        }
        assert!(request_frame(&request, PRODUCE_LAST_CLASSIC_VERSION + 1, 1, "k").is_err());
    }
}
