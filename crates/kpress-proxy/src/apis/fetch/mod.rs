//! Fetch: batches re-encoded for consumers that cannot read them. A consumer that
//! fetches with Fetch v4-v9 predates zstd (KIP-110): a broker before 4.0 answers its
//! zstd partitions with UNSUPPORTED_COMPRESSION_TYPE, and one from 4.0 on sends the
//! zstd batches, which the consumer cannot decompress. Other clients read fewer codecs
//! than their version allows: what a client reads is its Fetch version's codecs less
//! those the first matching `[[clients]]` rule leaves out ([`client_reads`]). The path,
//! top to bottom:
//!
//! 1. Request ([`upgrade`]): a Fetch v4-v9 goes to the broker at v10 (the same fields
//!    as v9), with Kafka's defaults for the fields the client's version lacks; fetch
//!    sessions, isolation level and sizes go on as sent. The client's version is kept
//!    for the response. A v10 or later Fetch from a client a rule limits goes on as
//!    read, its answer rewritten at that version: up to v11 decoded and encoded
//!    again, from v12 (flexible) walked and written back with every byte but the
//!    records as read; v13+ name topics by id, which the metrics and the cache know
//!    by the name kpress learned from Metadata ([`response::topic_key`]). Versions
//!    kpress does not parse are relayed both ways, counted. Any other Fetch goes on
//!    as read.
//! 2. Response ([`response`]): the answer's partitions are surveyed on the
//!    connection's task (envelope and batch headers only). With no batch the consumer
//!    cannot read, it goes back as read (v7-v9 are v10 on the wire) or with its
//!    envelope written at the client's version (v4-v6). Otherwise, under a global
//!    work slot (within `[limits] max_rewrite_wait_ms`, as Produce), each such batch
//!    is recompressed into the consumer codec ([`reencode`]), or copied from the
//!    cache of re-encoded batches ([`cache`]) when another consumer had it done
//!    (served from it even with no slot): offsets, producer id, epoch, sequences,
//!    timestamps and the other attributes stay as stored, the CRC is computed again. A
//!    batch that can never be re-encoded (damaged, a decompression bomb) goes on as
//!    stored, counted by reason: the consumer meets it as it would without kpress. One
//!    that cannot be re-encoded now (past the deadline, no slot, over the response's
//!    budget) ends the partition's records, counted by reason, and the consumer
//!    fetches from it again.
//!
//! Fetch v16+ responses carry broker addresses (KIP-951), rewritten like Metadata's:
//! for a client whose records are re-encoded, addresses first, then records, both on
//! the one response.

mod cache;
mod metrics;
mod reencode;
mod report;
mod response;
pub(crate) mod seen;
#[cfg(test)]
mod tests;
mod upgrade;

use std::sync::Arc;

use kpress_codec::Codec;
use kpress_config::{CodecSet, ConsumerSettings};
use kpress_protocol::api::{self, ApiFacts};
use kpress_protocol::{api_key, FETCH_MAX_VERSION, FETCH_MIN_VERSION};

use super::addresses;
use crate::handler::{
    ApiHandler, ClientSoftware, ConnectionContext, Frame, HandlerError, RequestContext,
    RequestStep, ResponseStep,
};

/// The first Fetch version whose answers may carry zstd batches (KIP-110), as the
/// registry states it.
pub(crate) const FETCH_FIRST_ZSTD_VERSION: i16 = match api::facts(api_key::FETCH) {
    Some(ApiFacts {
        zstd_from: Some(version),
        ..
    }) => *version,
    _ => panic!("the registry states Fetch's first zstd version"),
};

/// The codec a batch stored in `codec` is re-encoded into for a client that reads
/// `reads` (see [`client_reads`]), under `consumers` (`[consumers]` of the policy in
/// force), or `None` when the client gets it as stored: `[consumers] codec` if the
/// client reads it, else the codec [`CodecSet::choose`] picks among those it reads.
pub(crate) fn needs_reencode(
    consumers: &ConsumerSettings,
    reads: CodecSet,
    codec: Codec,
) -> Option<Codec> {
    if !consumers.reencode {
        return None;
    }
    (!reads.contains(codec)).then(|| reads.choose(consumers.codec))
}

/// The codecs a client fetching at `client_version` can read, as far as its version
/// tells.
fn readable_at(client_version: i16) -> CodecSet {
    if client_version < FETCH_FIRST_ZSTD_VERSION {
        CodecSet::ALL.without(Codec::Zstd)
    } else {
        CodecSet::ALL
    }
}

/// The codecs a client reads: those its Fetch version allows, less those the first
/// `[[clients]]` rule matching it (by `client_id`, the `software` it announced and
/// the `listener` it came through) leaves out. `software` is asked only when there
/// are rules.
fn client_reads(
    consumers: &ConsumerSettings,
    client_version: i16,
    client_id: Option<&str>,
    software: impl FnOnce() -> Option<ClientSoftware>,
    listener: &str,
) -> CodecSet {
    let by_version = readable_at(client_version);
    if consumers.clients.rules().is_empty() {
        return by_version;
    }
    let software = software();
    let software = software.as_ref().map(|s| kpress_config::ClientSoftware {
        name: s.name(),
        version: s.version(),
    });
    let by_rule = consumers
        .clients
        .accepts(client_id, software.as_ref(), listener);
    CodecSet::of(by_version.iter().filter(|codec| by_rule.contains(*codec)))
}

/// Whether a Fetch at `client_version` goes to the broker at
/// [`FETCH_FIRST_ZSTD_VERSION`], so that it answers with zstd batches to re-encode.
fn upgrades(consumers: &ConsumerSettings, reads: CodecSet, client_version: i16) -> bool {
    (FETCH_MIN_VERSION..FETCH_FIRST_ZSTD_VERSION).contains(&client_version)
        && needs_reencode(consumers, reads, Codec::Zstd).is_some()
}

/// What the request step keeps for the response step of a request from a client that
/// does not read every codec.
#[derive(Debug, Clone)]
struct Upgraded {
    client_version: i16,
    /// The version the request went to the broker at.
    upstream_version: i16,
    /// The codecs the client reads.
    reads: CodecSet,
    /// `[consumers]` of the policy the request was read under.
    consumers: Arc<ConsumerSettings>,
}

impl Upgraded {
    /// The codec batches stored in `codec` become for this client, if any.
    fn target(&self, codec: Codec) -> Option<Codec> {
        needs_reencode(&self.consumers, self.reads, codec)
    }

    /// The codec every batch this client cannot read becomes.
    fn output_codec(&self) -> Codec {
        self.reads.choose(self.consumers.codec)
    }
}

#[derive(Debug)]
pub(crate) struct Fetch;

impl ApiHandler for Fetch {
    fn on_request(
        &self,
        conn: &Arc<ConnectionContext>,
        request: &mut RequestContext,
        frame: Frame,
    ) -> Result<RequestStep, HandlerError> {
        let forward = upgrade::request_step(conn, request, frame);
        note_seen(conn, request);
        Ok(RequestStep::Forward(forward))
    }

    fn on_response(
        &self,
        conn: &Arc<ConnectionContext>,
        request: &mut RequestContext,
        frame: Frame,
    ) -> Result<ResponseStep, HandlerError> {
        match request.kept::<Upgraded>().cloned() {
            Some(upgraded) => response::response_step(conn, request, upgraded, frame),
            None => addresses::rewrite(conn, request, frame),
        }
    }
}

/// Records a consumer that does not read every codec in [`seen::SeenConsumers`], from
/// what the request step kept. A client it kept nothing for costs a policy snapshot
/// and a comparison; the rules are matched again only where the request step did not
/// keep what it found (`[consumers] reencode = false`, a version kpress does not
/// read).
fn note_seen(conn: &ConnectionContext, request: &mut RequestContext) {
    let version = request.api_version();
    let (reads, handling) = match request.kept::<Upgraded>() {
        Some(upgraded) => (upgraded.reads, seen::Handling::Reencoded),
        None => {
            let consumers = Arc::clone(&conn.policy().consumers);
            // With re-encoding on, the request step keeps what it found for every
            // limited client at a version kpress reads: nothing kept, every codec read.
            let read_versions = FETCH_MIN_VERSION..=FETCH_MAX_VERSION;
            if consumers.reencode && read_versions.contains(&version) {
                return;
            }
            if version >= FETCH_FIRST_ZSTD_VERSION && consumers.clients.rules().is_empty() {
                return;
            }
            let reads = client_reads(
                &consumers,
                version,
                request.client_id(),
                || conn.client_software(),
                conn.listener(),
            );
            if reads == CodecSet::ALL {
                return;
            }
            let handling = if consumers.reencode {
                seen::Handling::VersionNotReencoded
            } else {
                seen::Handling::ReencodeOff
            };
            (reads, handling)
        }
    };
    let software = conn.client_software();
    seen::SeenConsumers::global().note(seen::Sighting {
        client_id: request.client_id(),
        software: software.as_ref(),
        listener: conn.listener(),
        version,
        reads,
        handling,
    });
}
