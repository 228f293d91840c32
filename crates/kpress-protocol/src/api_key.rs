//! Kafka API keys (the `apiKey` of each `common/message/*Request.json`) that
//! kpress routes on, parses or documents. Values come from kafka-protocol's
//! [`ApiKey`], so each key is stated once.

use kafka_protocol::messages::ApiKey;

pub const PRODUCE: i16 = ApiKey::Produce as i16;
pub const FETCH: i16 = ApiKey::Fetch as i16;
pub const METADATA: i16 = ApiKey::Metadata as i16;
pub const FIND_COORDINATOR: i16 = ApiKey::FindCoordinator as i16;
pub const DESCRIBE_CONFIGS: i16 = ApiKey::DescribeConfigs as i16;
pub const CREATE_TOPICS: i16 = ApiKey::CreateTopics as i16;
pub const SASL_HANDSHAKE: i16 = ApiKey::SaslHandshake as i16;
pub const API_VERSIONS: i16 = ApiKey::ApiVersions as i16;
pub const SASL_AUTHENTICATE: i16 = ApiKey::SaslAuthenticate as i16;
pub const DESCRIBE_QUORUM: i16 = ApiKey::DescribeQuorum as i16;
pub const DESCRIBE_CLUSTER: i16 = ApiKey::DescribeCluster as i16;
pub const SHARE_FETCH: i16 = ApiKey::ShareFetch as i16;
pub const SHARE_ACKNOWLEDGE: i16 = ApiKey::ShareAcknowledge as i16;

/// Kafka's name of `api_key` (`Produce`, `ApiVersions`, as kafka-protocol's [`ApiKey`]
/// spells it), or `unknown` for a key Kafka does not define: the `api` label of
/// metrics, bounded by Kafka's list whatever a client sends.
pub fn name(api_key: i16) -> &'static str {
    static NAMES: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
        let mut names = Vec::new();
        for key in ApiKey::iter() {
            let index = key as usize;
            if names.len() <= index {
                names.resize(index + 1, UNKNOWN_NAME);
            }
            // Once per key for the process: the table lives as long as it does.
            names[index] = &*Box::leak(format!("{key:?}").into_boxed_str());
        }
        names
    });
    usize::try_from(api_key)
        .ok()
        .and_then(|index| NAMES.get(index))
        .copied()
        .unwrap_or(UNKNOWN_NAME)
}

/// [`name`] of a key Kafka does not define.
pub const UNKNOWN_NAME: &str = "unknown";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kafkas_and_unknown_keys_share_one() {
        assert_eq!(name(PRODUCE), "Produce");
        assert_eq!(name(API_VERSIONS), "ApiVersions");
        assert_eq!(name(SHARE_ACKNOWLEDGE), "ShareAcknowledge");
        for key in [-1, 93, 1000, i16::MAX, i16::MIN] {
            assert_eq!(name(key), UNKNOWN_NAME, "{key}");
        }
    }

    #[test]
    fn keys_are_kafkas() {
        assert_eq!(
            [
                PRODUCE,
                FETCH,
                METADATA,
                FIND_COORDINATOR,
                DESCRIBE_CONFIGS,
                SASL_HANDSHAKE,
                API_VERSIONS,
                SASL_AUTHENTICATE,
                DESCRIBE_QUORUM,
                DESCRIBE_CLUSTER,
                SHARE_FETCH,
                SHARE_ACKNOWLEDGE
            ],
            [0, 1, 3, 10, 32, 17, 18, 36, 55, 60, 78, 79]
        );
    }
}
