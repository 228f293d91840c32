//! Java kafka-clients from before zstd (`KAFKA_CLIENTS_PRE_ZSTD_VERSION` in
//! `scripts/versions.sh`, 2.0.1): it produces with Produce v3-v6 only, where a broker
//! refuses zstd. `scripts/setup.sh` fetches it alone (no broker) into
//! `.cache/kafka/<version>/libs` and compiles `tests/java-old/KpressClient.java`, the
//! `produce` and `consume` command lines of the current client, against it, so it runs
//! as a [`JavaClient`] like any other version's client.

use crate::java_client::JavaClient;

/// The pinned version, read from `scripts/versions.sh` so it never drifts.
pub fn pre_zstd_clients_version() -> &'static str {
    const VERSIONS_SH: &str = include_str!("../../scripts/versions.sh");
    const NAME: &str = "KAFKA_CLIENTS_PRE_ZSTD_VERSION=";
    VERSIONS_SH
        .lines()
        .find_map(|line| line.trim().strip_prefix(NAME))
        .map(str::trim)
        .unwrap_or_else(|| panic!("scripts/versions.sh does not set {NAME}"))
}

/// The old client (panics with "run scripts/setup.sh" if it is not built). It can
/// `produce` and `consume` (partitions assigned, no group); create topics with the
/// current client.
pub fn pre_zstd_java_client() -> JavaClient {
    JavaClient::new(pre_zstd_clients_version())
}
