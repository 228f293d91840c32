//! Whether the replicas of a fleet could share the autopilot's topic (`[autopilot]
//! topic`) when the policy has auto rules: kpress's principal must describe, read and
//! write it, and create it while it is missing. Asked without changing anything:
//! Metadata with the topic's authorized operations (KIP-430), and for a missing topic
//! a CreateTopics that only validates.

use kafka_protocol::messages::{CreateTopicsResponse, MetadataResponse};
use kpress_config::{Compression, Config};
use kpress_protocol::{api_key, decode_response, error_code, request_frame};
use kpress_proxy::{ApiMaxVersions, ClusterClient};

use super::findings::Finding;

/// Metadata reports a topic's authorized operations from v8 on.
const METADATA_AUTHORIZED_OPERATIONS_VERSION: i16 = 8;
/// The Metadata version kpress reads its answers at, at most.
const METADATA_MAX_VERSION: i16 = 12;
/// What a validating CreateTopics may wait for the controller.
const CREATE_TIMEOUT_MS: i32 = 10_000;

/// Kafka's ACL operation codes, as bits of `topic_authorized_operations`.
const READ: i32 = 3;
const WRITE: i32 = 4;
const DESCRIBE: i32 = 8;
/// The broker did not say (Kafka's "not requested" value).
const OPERATIONS_UNKNOWN: i32 = i32::MIN;

/// What the cluster answered about the fleet topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum FleetTopic {
    /// The topic exists; the operations the principal may perform on it, if told.
    Exists { operations: Option<i32> },
    /// Missing; whether a CreateTopics would be allowed (the error code if not).
    Missing { create_error: i16 },
    /// TOPIC_AUTHORIZATION_FAILED: the principal may not even describe it.
    DescribeDenied,
    /// No answer to judge by.
    Unchecked(String),
}

/// The finding for the fleet topic, or none when the policy has no auto rule.
pub(super) async fn fleet_findings(
    client: &mut ClusterClient,
    versions: &ApiMaxVersions,
    config: &Config,
) -> Vec<Finding> {
    if !has_auto_rules(config) {
        return Vec::new();
    }
    let settings = &config.autopilot;
    if !settings.share {
        return vec![judge(&settings.topic, false, None)];
    }
    let answer = ask(
        client,
        versions,
        &settings.topic,
        settings.replication_factor,
    )
    .await;
    vec![judge(&settings.topic, true, Some(&answer))]
}

fn has_auto_rules(config: &Config) -> bool {
    config.defaults.compression == Compression::Auto
        || config
            .topics
            .iter()
            .any(|rule| rule.policy.compression == Compression::Auto)
}

async fn ask(
    client: &mut ClusterClient,
    versions: &ApiMaxVersions,
    topic: &str,
    replication_factor: i16,
) -> FleetTopic {
    let Some(version) = versions
        .max_version(api_key::METADATA)
        .map(|v| v.min(METADATA_MAX_VERSION))
        .filter(|v| *v >= METADATA_AUTHORIZED_OPERATIONS_VERSION)
    else {
        return FleetTopic::Unchecked(
            "the broker does not report operations allowed on a topic (Metadata v8, Kafka 2.3+)"
                .into(),
        );
    };
    let request = kpress_protocol::metadata_topics_request(&[topic])
        .with_include_topic_authorized_operations(true);
    let metadata: MetadataResponse = match exchange(client, &request, version).await {
        Ok(response) => response,
        Err(reason) => return FleetTopic::Unchecked(reason),
    };
    let Some(answer) = metadata
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == topic))
    else {
        return FleetTopic::Unchecked("Metadata did not answer for the topic".into());
    };
    match answer.error_code {
        error_code::NONE => FleetTopic::Exists {
            operations: (answer.topic_authorized_operations != OPERATIONS_UNKNOWN)
                .then_some(answer.topic_authorized_operations),
        },
        error_code::TOPIC_AUTHORIZATION_FAILED => FleetTopic::DescribeDenied,
        error_code::UNKNOWN_TOPIC_OR_PARTITION => FleetTopic::Missing {
            create_error: validate_create(client, versions, topic, replication_factor).await,
        },
        code => FleetTopic::Unchecked(format!("Metadata answered error code {code}")),
    }
}

/// The error code of a CreateTopics for `topic` as kpress would create it, validated
/// only (nothing is created); -1 when it could not be asked.
async fn validate_create(
    client: &mut ClusterClient,
    versions: &ApiMaxVersions,
    topic: &str,
    replication_factor: i16,
) -> i16 {
    let Some(version) = versions
        .max_version(api_key::CREATE_TOPICS)
        .map(|v| v.min(kpress_protocol::CREATE_TOPICS_MAX_VERSION))
        .filter(|v| *v >= kpress_protocol::CREATE_TOPICS_MIN_VERSION)
    else {
        return -1;
    };
    let request = kpress_protocol::create_topic_request(
        topic,
        1,
        replication_factor,
        &[("cleanup.policy", "compact")],
        CREATE_TIMEOUT_MS,
    )
    .with_validate_only(true);
    match exchange::<_, CreateTopicsResponse>(client, &request, version).await {
        Ok(response) => response
            .topics
            .iter()
            .find(|t| t.name.as_str() == topic)
            .map_or(-1, |t| t.error_code),
        Err(_) => -1,
    }
}

async fn exchange<R, T>(client: &mut ClusterClient, request: &R, version: i16) -> Result<T, String>
where
    R: kafka_protocol::protocol::Request<Response = T>,
    T: kpress_protocol::GuardedResponse,
{
    let frame = request_frame(request, version, client.next_correlation_id(), "kpress")
        .map_err(|e| e.to_string())?;
    let body = client.request(&frame).await.map_err(|e| e.to_string())?;
    decode_response::<T>(version, &body).map_err(|e| e.to_string())
}

/// What `answer` means for sharing `topic`; `None` when sharing is off.
pub(super) fn judge(topic: &str, share: bool, answer: Option<&FleetTopic>) -> Finding {
    const ALONE: &str = "each replica would decide alone";
    const NEEDS: &str = "kpress's principal needs CREATE (or the topic created: one partition, \
                         cleanup.policy=compact), WRITE, READ and DESCRIBE on it";
    let subject = format!("autopilot topic {topic}");
    let alone = |why: String| {
        Finding::problem(
            "autopilot_alone",
            subject.clone(),
            format!(
                "{why}: {ALONE} on the traffic it carries, and start cold after a restart; {NEEDS}"
            ),
        )
    };
    let Some(answer) = answer.filter(|_| share) else {
        return Finding::info(
            "autopilot_alone",
            subject,
            format!("[autopilot] share = false: {ALONE}"),
        );
    };
    match answer {
        FleetTopic::Exists {
            operations: Some(ops),
        } => {
            let missing: Vec<&str> = [(DESCRIBE, "DESCRIBE"), (READ, "READ"), (WRITE, "WRITE")]
                .iter()
                .filter(|(op, _)| ops & (1 << op) == 0)
                .map(|(_, name)| *name)
                .collect();
            if missing.is_empty() {
                Finding::info(
                    "autopilot_shared",
                    subject,
                    format!("{topic} can be shared: kpress may describe, read and write it"),
                )
            } else {
                alone(format!("kpress may not {} {topic}", missing.join(", ")))
            }
        }
        FleetTopic::Exists { operations: None } => Finding::info(
            "autopilot_unchecked",
            subject,
            format!(
                "{topic} exists; the broker did not say what kpress may do on it: {NEEDS}, \
                 else {ALONE}"
            ),
        ),
        FleetTopic::Missing { create_error: 0 } => Finding::info(
            "autopilot_shared",
            subject,
            format!(
                "{topic} does not exist yet and kpress may create it (checked without \
                 creating it); it then needs READ and WRITE on it too"
            ),
        ),
        FleetTopic::Missing { create_error } if is_denied(*create_error) => alone(format!(
            "{topic} does not exist and kpress may not create it (error code {create_error})"
        )),
        FleetTopic::Missing { create_error } => Finding::info(
            "autopilot_unchecked",
            subject,
            format!(
                "{topic} does not exist and creating it was not confirmed (error code \
                 {create_error}): {NEEDS}, else {ALONE}"
            ),
        ),
        FleetTopic::DescribeDenied => alone(format!("kpress may not describe {topic}")),
        FleetTopic::Unchecked(reason) => Finding::info(
            "autopilot_unchecked",
            subject,
            format!("could not check {topic} ({reason}): {NEEDS}, else {ALONE}"),
        ),
    }
}

fn is_denied(code: i16) -> bool {
    code == error_code::TOPIC_AUTHORIZATION_FAILED
        || code == error_code::CLUSTER_AUTHORIZATION_FAILED
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::findings::Severity;

    fn bits(ops: &[i32]) -> Option<i32> {
        Some(ops.iter().fold(0, |acc, op| acc | (1 << op)))
    }

    #[test]
    fn every_answer_says_shared_or_alone() {
        let t = "_kpress_autopilot";
        let all = judge(
            t,
            true,
            Some(&FleetTopic::Exists {
                operations: bits(&[READ, WRITE, DESCRIBE, 10]),
            }),
        );
        assert_eq!(
            (all.severity, all.kind),
            (Severity::Info, "autopilot_shared")
        );

        let no_write = judge(
            t,
            true,
            Some(&FleetTopic::Exists {
                operations: bits(&[READ, DESCRIBE]),
            }),
        );
        assert_eq!(no_write.severity, Severity::Problem);
        assert!(
            no_write.message.contains("may not WRITE"),
            "{}",
            no_write.message
        );
        assert!(no_write.message.contains("each replica would decide alone"));

        let denied = judge(t, true, Some(&FleetTopic::DescribeDenied));
        assert_eq!(denied.kind, "autopilot_alone");
        assert!(denied.message.contains("may not describe"));

        let creatable = judge(t, true, Some(&FleetTopic::Missing { create_error: 0 }));
        assert_eq!(creatable.kind, "autopilot_shared");
        let not_creatable = judge(
            t,
            true,
            Some(&FleetTopic::Missing {
                create_error: error_code::CLUSTER_AUTHORIZATION_FAILED,
            }),
        );
        assert_eq!(not_creatable.severity, Severity::Problem);
        assert!(not_creatable.message.contains("may not create"));

        let off = judge(t, false, None);
        assert_eq!(
            (off.severity, off.kind),
            (Severity::Info, "autopilot_alone")
        );
        assert!(off.message.contains("share = false"));

        let unknown = judge(t, true, Some(&FleetTopic::Exists { operations: None }));
        assert_eq!(
            (unknown.severity, unknown.kind),
            (Severity::Info, "autopilot_unchecked")
        );
    }

    #[test]
    fn only_policies_with_auto_rules_are_checked() {
        assert!(!has_auto_rules(&crate::test_policy::with("")));
        assert!(has_auto_rules(&crate::test_policy::with(
            "[defaults]\ncompression.type = \"auto\"\n"
        )));
        assert!(has_auto_rules(&crate::test_policy::with(
            "[[topics]]\nmatch = \"logs.*\"\ncompression.type = \"auto\"\n"
        )));
    }
}
