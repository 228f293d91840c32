//! Kafka API keys (the `apiKey` of each `common/message/*Request.json`) that
//! kpress routes on, parses or documents. Values come from kafka-protocol's
//! [`ApiKey`], so each key is stated once.

use kafka_protocol::messages::ApiKey;

pub const PRODUCE: i16 = ApiKey::Produce as i16;
pub const FETCH: i16 = ApiKey::Fetch as i16;
pub const METADATA: i16 = ApiKey::Metadata as i16;
pub const FIND_COORDINATOR: i16 = ApiKey::FindCoordinator as i16;
pub const SASL_HANDSHAKE: i16 = ApiKey::SaslHandshake as i16;
pub const API_VERSIONS: i16 = ApiKey::ApiVersions as i16;
pub const SASL_AUTHENTICATE: i16 = ApiKey::SaslAuthenticate as i16;
pub const DESCRIBE_QUORUM: i16 = ApiKey::DescribeQuorum as i16;
pub const DESCRIBE_CLUSTER: i16 = ApiKey::DescribeCluster as i16;
pub const SHARE_FETCH: i16 = ApiKey::ShareFetch as i16;
pub const SHARE_ACKNOWLEDGE: i16 = ApiKey::ShareAcknowledge as i16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_kafkas() {
        assert_eq!(
            [
                PRODUCE,
                FETCH,
                METADATA,
                FIND_COORDINATOR,
                SASL_HANDSHAKE,
                API_VERSIONS,
                SASL_AUTHENTICATE,
                DESCRIBE_QUORUM,
                DESCRIBE_CLUSTER,
                SHARE_FETCH,
                SHARE_ACKNOWLEDGE
            ],
            [0, 1, 3, 10, 17, 18, 36, 55, 60, 78, 79]
        );
    }
}
