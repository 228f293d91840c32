//! DescribeConfigs (v1-v4) for kpress's own questions about topics (`kpress doctor`):
//! a request naming the topics and the config keys wanted, and the
//! response read back into plain values, its counts checked against the
//! bytes present before kafka-protocol sizes anything from them.

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::StrBytes;

use crate::error::{ProtocolError, WireError};
use crate::typed::decode_response;
use crate::wire::Reader;
use crate::{api, api_key};

const API: &str = "DescribeConfigs";
/// v0 is gone from Kafka 4.0; v1 (Kafka 1.1+) reports each value's source.
pub const DESCRIBE_CONFIGS_MIN_VERSION: i16 = 1;
pub const DESCRIBE_CONFIGS_MAX_VERSION: i16 = 4;
const FIRST_FLEXIBLE: i16 = api::first_flexible(api_key::DESCRIBE_CONFIGS);
/// Kafka's `ConfigResource.Type.TOPIC`.
const TOPIC_RESOURCE: i8 = 2;

/// The version to ask a broker whose ApiVersions lists DescribeConfigs up to
/// `broker_max`; `None` when it has none kpress reads.
pub fn describe_configs_version(broker_max: i16) -> Option<i16> {
    let version = broker_max.min(DESCRIBE_CONFIGS_MAX_VERSION);
    (version >= DESCRIBE_CONFIGS_MIN_VERSION).then_some(version)
}

/// A DescribeConfigs request asking for `keys` of each of `topics`, to send with
/// [`crate::request_frame`] at a version [`describe_configs_version`] gives.
pub fn describe_topic_configs_request(topics: &[&str], keys: &[&str]) -> DescribeConfigsRequest {
    let keys: Vec<StrBytes> = keys
        .iter()
        .map(|k| StrBytes::from_string((*k).to_owned()))
        .collect();
    let resources = topics
        .iter()
        .map(|topic| {
            DescribeConfigsResource::default()
                .with_resource_type(TOPIC_RESOURCE)
                .with_resource_name(StrBytes::from_string((*topic).to_owned()))
                .with_configuration_keys(Some(keys.clone()))
        })
        .collect();
    DescribeConfigsRequest::default()
        .with_resources(resources)
        .with_include_synonyms(false)
        .with_include_documentation(false)
}

/// Where a config value comes from (Kafka's `DescribeConfigsResponse.ConfigSource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    /// Set on the topic itself.
    Topic,
    /// A broker's dynamic config, for that broker.
    DynamicBroker,
    /// The cluster-wide dynamic broker default.
    DynamicDefaultBroker,
    /// A broker's `server.properties`.
    StaticBroker,
    /// Kafka's built-in default.
    Default,
    /// Any other code (unknown, or a source topics do not have).
    Other(i8),
}

impl ConfigSource {
    fn from_code(code: i8) -> ConfigSource {
        match code {
            1 => ConfigSource::Topic,
            2 => ConfigSource::DynamicBroker,
            3 => ConfigSource::DynamicDefaultBroker,
            4 => ConfigSource::StaticBroker,
            5 => ConfigSource::Default,
            other => ConfigSource::Other(other),
        }
    }

    /// A short name: `topic`, `dynamic_broker`, `dynamic_default_broker`,
    /// `static_broker`, `default` or `unknown`.
    pub fn name(self) -> &'static str {
        match self {
            ConfigSource::Topic => "topic",
            ConfigSource::DynamicBroker => "dynamic_broker",
            ConfigSource::DynamicDefaultBroker => "dynamic_default_broker",
            ConfigSource::StaticBroker => "static_broker",
            ConfigSource::Default => "default",
            ConfigSource::Other(_) => "unknown",
        }
    }
}

/// One config value of a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    /// `None` for a sensitive or unset value.
    pub value: Option<String>,
    pub source: ConfigSource,
}

/// What the broker answered for one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicConfigs {
    pub topic: String,
    /// Kafka's error code (0: none) and message, e.g. 3 for an unknown topic.
    pub error_code: i16,
    pub error_message: Option<String>,
    pub entries: Vec<ConfigEntry>,
}

impl TopicConfigs {
    /// The value of config `name`, if the broker listed it with one.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|e| e.name == name)
            .and_then(|e| e.value.as_deref())
    }

    /// The entry of config `name`, if the broker listed it.
    pub fn entry(&self, name: &str) -> Option<&ConfigEntry> {
        self.entries.iter().find(|e| e.name == name)
    }
}

/// Reads a DescribeConfigs response body (after its response header): one
/// [`TopicConfigs`] per topic resource answered; other resource kinds are skipped.
pub fn parse_describe_configs_response(
    api_version: i16,
    body: &[u8],
) -> Result<Vec<TopicConfigs>, ProtocolError> {
    decode_response(api_version, body).map(topic_configs)
}

/// One [`TopicConfigs`] per topic resource of a decoded DescribeConfigs `response`;
/// other resource kinds are skipped.
pub fn topic_configs(response: DescribeConfigsResponse) -> Vec<TopicConfigs> {
    response
        .results
        .into_iter()
        .filter(|result| result.resource_type == TOPIC_RESOURCE)
        .map(|result| TopicConfigs {
            topic: result.resource_name.to_string(),
            error_code: result.error_code,
            error_message: result.error_message.map(|m| m.to_string()),
            entries: result
                .configs
                .into_iter()
                .map(|config| ConfigEntry {
                    name: config.name.to_string(),
                    value: config.value.map(|v| v.to_string()),
                    source: ConfigSource::from_code(config.config_source),
                })
                .collect(),
        })
        .collect()
}

impl crate::typed::sealed::Guarded for DescribeConfigsResponse {
    const API: &'static str = API;
    const VERSIONS: api::Versions = api::Versions {
        min: DESCRIBE_CONFIGS_MIN_VERSION,
        max: DESCRIBE_CONFIGS_MAX_VERSION,
    };

    fn guard(body: &[u8], version: i16) -> Result<(), WireError> {
        walk_describe_configs_response(body, version)
    }
}

/// Bounds-checked walk of a DescribeConfigs response: the guard before decoding.
fn walk_describe_configs_response(body: &[u8], v: i16) -> Result<(), WireError> {
    let flex = v >= FIRST_FLEXIBLE;
    let mut r = Reader::new(body);
    r.i32()?; // throttle_time_ms
              // error_code, error_message, resource_type, resource_name, configs (+ tags)
    let min_result = if flex {
        2 + 1 + 1 + 1 + 1 + 1
    } else {
        2 + 2 + 1 + 2 + 4
    };
    let results = r.required_count(flex, min_result, "results")?;
    for _ in 0..results {
        r.i16()?; // error_code
        r.skip_string(flex)?; // error_message
        r.skip(1)?; // resource_type
        r.skip_string(flex)?; // resource_name
                              // name, value, read_only, config_source, is_sensitive, synonyms,
                              // v3+ config_type and documentation (+ tags)
        let min_config = if flex {
            1 + 1 + 3 + 1 + 1 + 1 + 1
        } else {
            2 + 2 + 3 + 4 + if v >= 3 { 1 + 2 } else { 0 }
        };
        let configs = r.required_count(flex, min_config, "configs")?;
        for _ in 0..configs {
            r.skip_string(flex)?; // name
            r.skip_string(flex)?; // value
            r.skip(3)?; // read_only, config_source, is_sensitive
            let min_synonym = if flex { 1 + 1 + 1 + 1 } else { 2 + 2 + 1 };
            let synonyms = r.required_count(flex, min_synonym, "synonyms")?;
            for _ in 0..synonyms {
                r.skip_string(flex)?; // name
                r.skip_string(flex)?; // value
                r.skip(1)?; // source
                if flex {
                    r.skip_tagged_fields()?;
                }
            }
            if v >= 3 {
                r.skip(1)?; // config_type
                r.skip_string(flex)?; // documentation
            }
            if flex {
                r.skip_tagged_fields()?;
            }
        }
        if flex {
            r.skip_tagged_fields()?;
        }
    }
    if flex {
        r.skip_tagged_fields()?;
    }
    r.finish()
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::describe_configs_response::{
        DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
    };
    use kafka_protocol::messages::RequestHeader;
    use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};

    use super::*;
    use crate::frame::SIZE_PREFIX_LEN;

    fn response() -> DescribeConfigsResponse {
        let config = |name: &'static str, value: Option<&'static str>, source: i8| {
            DescribeConfigsResourceResult::default()
                .with_name(StrBytes::from_static_str(name))
                .with_value(value.map(StrBytes::from_static_str))
                .with_config_source(source)
                .with_synonyms(vec![DescribeConfigsSynonym::default()
                    .with_name(StrBytes::from_static_str(name))
                    .with_source(5)])
        };
        DescribeConfigsResponse::default().with_results(vec![
            DescribeConfigsResult::default()
                .with_resource_type(TOPIC_RESOURCE)
                .with_resource_name(StrBytes::from_static_str("orders"))
                .with_configs(vec![
                    config("compression.type", Some("gzip"), 1),
                    config("max.message.bytes", Some("1048588"), 5),
                    config("compression.zstd.level", None, 9),
                ]),
            DescribeConfigsResult::default()
                .with_error_code(3)
                .with_error_message(Some(StrBytes::from_static_str("no such topic")))
                .with_resource_type(TOPIC_RESOURCE)
                .with_resource_name(StrBytes::from_static_str("gone")),
            // A broker resource: not a topic, skipped.
            DescribeConfigsResult::default()
                .with_resource_type(4)
                .with_resource_name(StrBytes::from_static_str("1")),
        ])
    }

    fn encoded(version: i16) -> Vec<u8> {
        let mut out = BytesMut::new();
        response().encode(&mut out, version).unwrap();
        out.to_vec()
    }

    #[test]
    fn every_version_reads_back_values_sources_and_errors() {
        for version in DESCRIBE_CONFIGS_MIN_VERSION..=DESCRIBE_CONFIGS_MAX_VERSION {
            let topics = parse_describe_configs_response(version, &encoded(version)).unwrap();
            assert_eq!(topics.len(), 2, "v{version}");
            let orders = &topics[0];
            assert_eq!(orders.topic, "orders");
            assert_eq!(orders.error_code, 0);
            assert_eq!(orders.value("compression.type"), Some("gzip"));
            assert_eq!(
                orders.entry("compression.type").unwrap().source,
                ConfigSource::Topic
            );
            assert_eq!(
                orders.entry("max.message.bytes").unwrap().source.name(),
                "default"
            );
            assert_eq!(orders.value("compression.zstd.level"), None);
            assert_eq!(
                orders.entry("compression.zstd.level").unwrap().source,
                ConfigSource::Other(9)
            );
            assert_eq!(topics[1].error_code, 3);
            assert_eq!(topics[1].error_message.as_deref(), Some("no such topic"));
        }
    }

    #[test]
    fn truncated_or_trailing_bodies_are_refused() {
        for version in DESCRIBE_CONFIGS_MIN_VERSION..=DESCRIBE_CONFIGS_MAX_VERSION {
            let body = encoded(version);
            for cut in 0..body.len() {
                assert!(
                    parse_describe_configs_response(version, &body[..cut]).is_err(),
                    "v{version} cut at {cut}"
                );
            }
            let mut longer = body.clone();
            longer.push(0);
            let err = parse_describe_configs_response(version, &longer).unwrap_err();
            assert!(
                matches!(
                    err,
                    ProtocolError::MalformedResponse {
                        source: WireError::TrailingBytes { trailing: 1 },
                        ..
                    }
                ),
                "v{version}: {err}"
            );
        }
    }

    #[test]
    fn hostile_counts_fail_before_anything_is_sized_from_them() {
        // throttle, then a results count of i32::MAX (classic) or 2^32-2 (compact).
        let classic = [0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff];
        let err = parse_describe_configs_response(2, &classic).unwrap_err();
        assert!(
            matches!(
                err,
                ProtocolError::MalformedResponse {
                    source: WireError::CountTooLarge { .. },
                    ..
                }
            ),
            "{err}"
        );
        let compact = [0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(parse_describe_configs_response(4, &compact).is_err());
        // One topic whose configs count claims more than remains.
        let mut body = vec![
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            1,
            0,
            0,
            0xff,
            0xff,
            TOPIC_RESOURCE as u8,
        ];
        body.extend_from_slice(&[0, 1, b't', 0, 0, 0x10, 0]);
        assert!(parse_describe_configs_response(1, &body).is_err());
    }

    #[test]
    fn the_request_names_each_topic_and_key() {
        for version in DESCRIBE_CONFIGS_MIN_VERSION..=DESCRIBE_CONFIGS_MAX_VERSION {
            let request = describe_topic_configs_request(
                &["a", "b"],
                &["compression.type", "max.message.bytes"],
            );
            let frame = crate::request_frame(&request, version, -7, "kpress-doctor").unwrap();
            let mut payload = Bytes::copy_from_slice(&frame[SIZE_PREFIX_LEN..]);
            let header = RequestHeader::decode(
                &mut payload,
                DescribeConfigsRequest::header_version(version),
            )
            .unwrap();
            assert_eq!(header.request_api_key, api_key::DESCRIBE_CONFIGS);
            assert_eq!(header.request_api_version, version);
            assert_eq!(header.correlation_id, -7);
            let request = DescribeConfigsRequest::decode(&mut payload, version).unwrap();
            assert!(payload.is_empty(), "v{version}: trailing bytes");
            let names: Vec<&str> = request
                .resources
                .iter()
                .map(|r| r.resource_name.as_str())
                .collect();
            assert_eq!(names, ["a", "b"]);
            assert!(request.resources.iter().all(|r| {
                r.resource_type == TOPIC_RESOURCE
                    && r.configuration_keys.as_ref().unwrap().len() == 2
            }));
        }
        let request = describe_topic_configs_request(&["a"], &[]);
        assert!(crate::request_frame(&request, 0, 1, "k").is_err());
        assert!(crate::request_frame(&request, 5, 1, "k").is_err());
    }

    #[test]
    fn the_version_asked_is_the_newest_both_sides_read() {
        assert_eq!(describe_configs_version(4), Some(4));
        assert_eq!(describe_configs_version(9), Some(4));
        assert_eq!(describe_configs_version(2), Some(2));
        assert_eq!(describe_configs_version(0), None);
    }
}
