//! The registry of per-API facts: for every Kafka API key, the first version that uses
//! flexible (tagged-field) encoding, the versions kpress parses in the traffic it
//! relays, the first version whose responses carry broker node addresses that kpress
//! must rewrite (and how its responses are rewritten), the first version that names
//! topics by id, and the first version whose record batches may be zstd-compressed. Every other module reads these facts from here, so each one is stated
//! once.

/// Versions `min..=max` of one API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Versions {
    pub min: i16,
    pub max: i16,
}

impl Versions {
    pub const fn contains(self, version: i16) -> bool {
        self.min <= version && version <= self.max
    }
}

/// How kpress rewrites an API's responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseRewrite {
    /// Brokers' addresses and topic names (Metadata).
    Metadata,
    /// The coordinator's address (FindCoordinator).
    FindCoordinator,
    /// Every broker's address (DescribeCluster).
    DescribeCluster,
    /// Versions capped to what kpress parses (ApiVersions).
    ApiVersions,
    /// KIP-951 `NodeEndpoints` (Produce, Fetch, ShareFetch, ShareAcknowledge).
    NodeEndpoints,
}

/// What kpress knows of one Kafka API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiFacts {
    /// The first flexible version, or `None` if no version is.
    pub first_flexible: Option<i16>,
    /// The versions kpress parses in relayed traffic (requests or responses); clients
    /// are capped to `max` in the ApiVersions responses kpress relays. `None`: kpress
    /// relays the API as bytes, whatever its version.
    pub parsed: Option<Versions>,
    /// The first version whose responses may carry broker node addresses, which kpress
    /// replaces by its own before a client sees them; `None`: no version does.
    pub node_addresses_from: Option<i16>,
    /// How responses are rewritten; `None`: relayed as read.
    pub response_rewrite: Option<ResponseRewrite>,
    /// The first version that names topics by id instead of by name (KIP-516); `None`:
    /// no version does, or kpress does not read them.
    pub topic_ids_from: Option<i16>,
    /// The first version whose record batches may be zstd-compressed (KIP-110): brokers
    /// refuse zstd in older Produce requests and do not send it in older Fetch
    /// responses. `None`: the API carries no record batches.
    pub zstd_from: Option<i16>,
}

impl ApiFacts {
    const fn flexible_from(version: i16) -> ApiFacts {
        ApiFacts {
            first_flexible: Some(version),
            ..ApiFacts::never_flexible()
        }
    }

    const fn never_flexible() -> ApiFacts {
        ApiFacts {
            first_flexible: None,
            parsed: None,
            node_addresses_from: None,
            response_rewrite: None,
            topic_ids_from: None,
            zstd_from: None,
        }
    }

    const fn parsed(self, min: i16, max: i16) -> ApiFacts {
        ApiFacts {
            parsed: Some(Versions { min, max }),
            ..self
        }
    }

    /// Responses carry node addresses from `version`, in KIP-951 `NodeEndpoints`.
    const fn endpoints_from(self, version: i16) -> ApiFacts {
        ApiFacts {
            node_addresses_from: Some(version),
            response_rewrite: Some(ResponseRewrite::NodeEndpoints),
            ..self
        }
    }

    /// Responses carry node addresses from `version`, rewritten as `rewrite` says.
    const fn addresses_as(self, version: i16, rewrite: ResponseRewrite) -> ApiFacts {
        ApiFacts {
            node_addresses_from: Some(version),
            response_rewrite: Some(rewrite),
            ..self
        }
    }

    /// Responses are rewritten as `rewrite` says, whatever their version.
    const fn rewritten_as(self, rewrite: ResponseRewrite) -> ApiFacts {
        ApiFacts {
            response_rewrite: Some(rewrite),
            ..self
        }
    }

    const fn topic_ids_from(self, version: i16) -> ApiFacts {
        ApiFacts {
            topic_ids_from: Some(version),
            ..self
        }
    }

    const fn zstd_from(self, version: i16) -> ApiFacts {
        ApiFacts {
            zstd_from: Some(version),
            ..self
        }
    }

    /// Whether record batches at `api_version` may be zstd-compressed (false for an API
    /// that carries none).
    pub const fn allows_zstd(&self, api_version: i16) -> bool {
        match self.zstd_from {
            Some(first) => api_version >= first,
            None => false,
        }
    }

    /// Whether `api_version` uses flexible encoding.
    pub const fn is_flexible(&self, api_version: i16) -> bool {
        match self.first_flexible {
            Some(first) => api_version >= first,
            None => false,
        }
    }

    /// Whether responses at `api_version` may carry broker node addresses.
    pub const fn carries_node_addresses(&self, api_version: i16) -> bool {
        match self.node_addresses_from {
            Some(first) => api_version >= first,
            None => false,
        }
    }
}

/// Facts of API `api_key`, or `None` for a key Kafka does not define (as of the specs
/// below).
pub const fn facts(api_key: i16) -> Option<&'static ApiFacts> {
    if api_key < 0 || api_key as usize >= APIS.len() {
        return None;
    }
    Some(&APIS[api_key as usize])
}

/// Every API key Kafka defines, with its facts.
pub fn all() -> impl Iterator<Item = (i16, &'static ApiFacts)> {
    (0i16..).zip(APIS.iter())
}

/// The facts of a known API, for constants (a compile error for an unknown key).
const fn known(api_key: i16) -> &'static ApiFacts {
    match facts(api_key) {
        Some(facts) => facts,
        None => panic!("an API key Kafka does not define"),
    }
}

/// `version`, which the registry must state (a compile error if it does not).
const fn stated(version: Option<i16>) -> i16 {
    match version {
        Some(version) => version,
        None => panic!("the registry states no such version for this API"),
    }
}

/// The first flexible version of a known API; for constants of the modules that parse
/// it (a compile error for an API that is never flexible or unknown).
pub(crate) const fn first_flexible(api_key: i16) -> i16 {
    stated(known(api_key).first_flexible)
}

/// The versions kpress parses of a known API; for constants of the modules that parse it.
pub(crate) const fn parsed(api_key: i16) -> Versions {
    match known(api_key).parsed {
        Some(versions) => versions,
        None => panic!("API kpress does not parse"),
    }
}

/// The first version of a known API whose responses carry node addresses.
pub(crate) const fn node_addresses_from(api_key: i16) -> i16 {
    stated(known(api_key).node_addresses_from)
}

/// The first version of a known API that names topics by id.
pub(crate) const fn topic_ids_from(api_key: i16) -> i16 {
    stated(known(api_key).topic_ids_from)
}

/// The first version of a known API whose record batches may be zstd-compressed.
pub(crate) const fn zstd_from(api_key: i16) -> i16 {
    stated(known(api_key).zstd_from)
}

/// How many APIs kpress parses in relayed traffic.
const PARSED_COUNT: usize = {
    let mut count = 0;
    let mut key = 0;
    while key < APIS.len() {
        if APIS[key].parsed.is_some() {
            count += 1;
        }
        key += 1;
    }
    count
};

/// `(api_key, parsed max version)` of every API kpress parses, by key.
pub(crate) const PARSED_MAX_VERSIONS: [(i16, i16); PARSED_COUNT] = {
    let mut out = [(0, 0); PARSED_COUNT];
    let (mut key, mut at) = (0, 0);
    while key < APIS.len() {
        if let Some(versions) = APIS[key].parsed {
            out[at] = (key as i16, versions.max);
            at += 1;
        }
        key += 1;
    }
    out
};

const fn flex(version: i16) -> ApiFacts {
    ApiFacts::flexible_from(version)
}

const NEVER: ApiFacts = ApiFacts::never_flexible();

const METADATA: ResponseRewrite = ResponseRewrite::Metadata;
const FIND_COORDINATOR: ResponseRewrite = ResponseRewrite::FindCoordinator;
const DESCRIBE_CLUSTER: ResponseRewrite = ResponseRewrite::DescribeCluster;
const API_VERSIONS: ResponseRewrite = ResponseRewrite::ApiVersions;

/// Per API key. First flexible versions are the `flexibleVersions` of Kafka 4.1.1's
/// message specs (`common/message/*Request.json` in kafka-clients), with Kafka 3.9.1's
/// for the ZooKeeper-era keys 4-7 that 4.0 removed. Parsed versions are those
/// kafka-protocol 0.18 and kpress's own walks handle. ShareFetch and ShareAcknowledge:
/// v1 only (KIP-932; v0 was early access in Kafka 4.0).
#[rustfmt::skip]
static APIS: [ApiFacts; 93] = [
    flex(9).parsed(3, 13).endpoints_from(10).topic_ids_from(13).zstd_from(7), // 0 Produce
    flex(12).parsed(4, 18).endpoints_from(16).topic_ids_from(13).zstd_from(10), // 1 Fetch
    flex(6),                                       // 2 ListOffsets
    flex(9).parsed(0, 13).addresses_as(0, METADATA).topic_ids_from(10), // 3 Metadata
    flex(4),                                       // 4 LeaderAndIsr (3.9)
    flex(2),                                       // 5 StopReplica (3.9)
    flex(6),                                       // 6 UpdateMetadata (3.9)
    flex(3),                                       // 7 ControlledShutdown (3.9)
    flex(8),                                       // 8 OffsetCommit
    flex(6),                                       // 9 OffsetFetch
    flex(3).parsed(0, 6).addresses_as(0, FIND_COORDINATOR), // 10 FindCoordinator
    flex(6),                                       // 11 JoinGroup
    flex(4),                                       // 12 Heartbeat
    flex(4),                                       // 13 LeaveGroup
    flex(4),                                       // 14 SyncGroup
    flex(5),                                       // 15 DescribeGroups
    flex(3),                                       // 16 ListGroups
    NEVER,                                         // 17 SaslHandshake
    flex(3).parsed(0, 4).rewritten_as(API_VERSIONS), // 18 ApiVersions
    flex(5),                                       // 19 CreateTopics
    flex(4),                                       // 20 DeleteTopics
    flex(2),                                       // 21 DeleteRecords
    flex(2),                                       // 22 InitProducerId
    flex(4),                                       // 23 OffsetForLeaderEpoch
    flex(3),                                       // 24 AddPartitionsToTxn
    flex(3),                                       // 25 AddOffsetsToTxn
    flex(3),                                       // 26 EndTxn
    flex(1),                                       // 27 WriteTxnMarkers
    flex(3),                                       // 28 TxnOffsetCommit
    flex(2),                                       // 29 DescribeAcls
    flex(2),                                       // 30 CreateAcls
    flex(2),                                       // 31 DeleteAcls
    flex(4),                                       // 32 DescribeConfigs
    flex(2),                                       // 33 AlterConfigs
    flex(2),                                       // 34 AlterReplicaLogDirs
    flex(2),                                       // 35 DescribeLogDirs
    flex(2),                                       // 36 SaslAuthenticate
    flex(2),                                       // 37 CreatePartitions
    flex(2),                                       // 38 CreateDelegationToken
    flex(2),                                       // 39 RenewDelegationToken
    flex(2),                                       // 40 ExpireDelegationToken
    flex(2),                                       // 41 DescribeDelegationToken
    flex(2),                                       // 42 DeleteGroups
    flex(2),                                       // 43 ElectLeaders
    flex(1),                                       // 44 IncrementalAlterConfigs
    flex(0),                                       // 45 AlterPartitionReassignments
    flex(0),                                       // 46 ListPartitionReassignments
    NEVER,                                         // 47 OffsetDelete
    flex(1),                                       // 48 DescribeClientQuotas
    flex(1),                                       // 49 AlterClientQuotas
    flex(0),                                       // 50 DescribeUserScramCredentials
    flex(0),                                       // 51 AlterUserScramCredentials
    flex(0),                                       // 52 Vote
    flex(1),                                       // 53 BeginQuorumEpoch
    flex(1),                                       // 54 EndQuorumEpoch
    flex(0),                                       // 55 DescribeQuorum
    flex(0),                                       // 56 AlterPartition
    flex(0),                                       // 57 UpdateFeatures
    flex(0),                                       // 58 Envelope
    flex(0),                                       // 59 FetchSnapshot
    flex(0).parsed(0, 2).addresses_as(0, DESCRIBE_CLUSTER), // 60 DescribeCluster
    flex(0),                                       // 61 DescribeProducers
    flex(0),                                       // 62 BrokerRegistration
    flex(0),                                       // 63 BrokerHeartbeat
    flex(0),                                       // 64 UnregisterBroker
    flex(0),                                       // 65 DescribeTransactions
    flex(0),                                       // 66 ListTransactions
    flex(0),                                       // 67 AllocateProducerIds
    flex(0),                                       // 68 ConsumerGroupHeartbeat
    flex(0),                                       // 69 ConsumerGroupDescribe
    flex(0),                                       // 70 ControllerRegistration
    flex(0),                                       // 71 GetTelemetrySubscriptions
    flex(0),                                       // 72 PushTelemetry
    flex(0),                                       // 73 AssignReplicasToDirs
    flex(0),                                       // 74 ListConfigResources
    flex(0),                                       // 75 DescribeTopicPartitions
    flex(0),                                       // 76 ShareGroupHeartbeat
    flex(0),                                       // 77 ShareGroupDescribe
    flex(0).parsed(1, 1).endpoints_from(1),        // 78 ShareFetch
    flex(0).parsed(1, 1).endpoints_from(1),        // 79 ShareAcknowledge
    flex(0),                                       // 80 AddRaftVoter
    flex(0),                                       // 81 RemoveRaftVoter
    flex(0),                                       // 82 UpdateRaftVoter
    flex(0),                                       // 83 InitializeShareGroupState
    flex(0),                                       // 84 ReadShareGroupState
    flex(0),                                       // 85 WriteShareGroupState
    flex(0),                                       // 86 DeleteShareGroupState
    flex(0),                                       // 87 ReadShareGroupStateSummary
    flex(0),                                       // 88 StreamsGroupHeartbeat
    flex(0),                                       // 89 StreamsGroupDescribe
    flex(0),                                       // 90 DescribeShareGroupOffsets
    flex(0),                                       // 91 AlterShareGroupOffsets
    flex(0),                                       // 92 DeleteShareGroupOffsets
];

/// Whether `api_key` is one whose response kpress may rewrite at `api_version`: one that
/// may carry node addresses, or ApiVersions (capped to what kpress parses).
pub(crate) fn rewrites_response(api_key: i16, api_version: i16) -> bool {
    facts(api_key).is_some_and(|facts| {
        facts.response_rewrite == Some(ResponseRewrite::ApiVersions)
            || facts.carries_node_addresses(api_version)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api_key;

    #[test]
    fn the_parsed_apis_are_the_ones_kpress_rewrites() {
        assert_eq!(
            PARSED_MAX_VERSIONS,
            [
                (api_key::PRODUCE, 13),
                (api_key::FETCH, 18),
                (api_key::METADATA, 13),
                (api_key::FIND_COORDINATOR, 6),
                (api_key::API_VERSIONS, 4),
                (api_key::DESCRIBE_CLUSTER, 2),
                (api_key::SHARE_FETCH, 1),
                (api_key::SHARE_ACKNOWLEDGE, 1),
            ]
        );
    }

    #[test]
    fn node_addresses_are_where_kafka_puts_them() {
        let carries = |key, version| facts(key).unwrap().carries_node_addresses(version);
        assert!(!carries(api_key::PRODUCE, 9));
        assert!(carries(api_key::PRODUCE, 10));
        assert!(!carries(api_key::FETCH, 15));
        assert!(carries(api_key::FETCH, 16));
        assert!(carries(api_key::METADATA, 0));
        assert!(!carries(2, 9)); // ListOffsets
        assert!(facts(93).is_none() && facts(-1).is_none());
    }

    #[test]
    fn zstd_batches_are_allowed_from_kip_110s_versions() {
        let zstd = |key, version| facts(key).unwrap().allows_zstd(version);
        assert!(!zstd(api_key::PRODUCE, 6) && zstd(api_key::PRODUCE, 7));
        assert!(!zstd(api_key::FETCH, 9) && zstd(api_key::FETCH, 10));
        assert!(!zstd(api_key::METADATA, 13));
    }
}
