//! Fetch: zstd batches re-encoded for consumers that cannot read them. A consumer that
//! fetches with Fetch v4-v9 predates zstd (KIP-110): a broker before 4.0 answers its
//! zstd partitions with UNSUPPORTED_COMPRESSION_TYPE, and one from 4.0 on sends the
//! zstd batches, which the consumer cannot decompress. The path, top to bottom:
//!
//! 1. Request ([`upgrade`]): a Fetch v4-v9 goes to the broker at v10 (the same fields
//!    as v9), with Kafka's defaults for the fields the client's version lacks; fetch
//!    sessions, isolation level and sizes go on as sent. The client's version is kept
//!    for the response. Any other Fetch goes on as read.
//! 2. Response ([`response`]): the v10 answer's partitions are surveyed on the
//!    connection's task (envelope and batch headers only). With no batch the consumer
//!    cannot read, it goes back as read (v7-v9 are v10 on the wire) or with its
//!    envelope written at the client's version (v4-v6). Otherwise, under a global
//!    work slot (within `[limits] max_rewrite_wait_ms`, as Produce), each such batch
//!    is recompressed into the consumer codec ([`reencode`]): offsets, producer id,
//!    epoch, sequences, timestamps and the other attributes stay as stored, the CRC
//!    is computed again. A partition never carries a batch its consumer cannot read:
//!    one that cannot be re-encoded (damaged, over a limit, past the deadline, no
//!    slot) ends the partition's records, counted by reason, and the consumer fetches
//!    from it again.
//!
//! Fetch v16+ responses carry broker addresses (KIP-951), rewritten like Metadata's.

// The response path does not look re-encoded batches up in it yet: when it does, this
// expectation fails, and goes.
#[cfg_attr(not(test), expect(dead_code))]
mod cache;
mod metrics;
mod reencode;
mod response;
#[cfg(test)]
mod tests;
mod upgrade;

use std::sync::Arc;

use kpress_codec::Codec;
use kpress_config::{CodecSet, ConsumerSettings};
use kpress_protocol::api::{self, ApiFacts};
use kpress_protocol::{api_key, FETCH_MIN_VERSION};

use super::addresses;
use crate::handler::{
    ApiHandler, ConnectionContext, Frame, HandlerError, RequestContext, RequestStep, ResponseStep,
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

/// The codec a batch stored in `codec` is re-encoded into for a client fetching at
/// `client_version`, under `consumers` (`[consumers]` of the policy in force), or
/// `None` when the client gets it as stored: `[consumers] codec` if the client reads
/// it, else the codec [`CodecSet::choose`] picks among those it reads.
pub(crate) fn needs_reencode(
    consumers: &ConsumerSettings,
    client_version: i16,
    codec: Codec,
) -> Option<Codec> {
    if !consumers.reencode {
        return None;
    }
    let reads = readable_at(client_version);
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

/// Whether a Fetch at `client_version` goes to the broker at
/// [`FETCH_FIRST_ZSTD_VERSION`], so that it answers with zstd batches to re-encode.
fn upgrades(consumers: &ConsumerSettings, client_version: i16) -> bool {
    (FETCH_MIN_VERSION..FETCH_FIRST_ZSTD_VERSION).contains(&client_version)
        && needs_reencode(consumers, client_version, Codec::Zstd).is_some()
}

/// What the request step keeps for the response step of a request from a client that
/// cannot read zstd.
#[derive(Debug, Clone)]
struct Upgraded {
    client_version: i16,
    /// The version the request went to the broker at.
    upstream_version: i16,
    /// `[consumers]` of the policy the request was read under.
    consumers: Arc<ConsumerSettings>,
}

impl Upgraded {
    /// The codec batches stored in `codec` become for this client, if any.
    fn target(&self, codec: Codec) -> Option<Codec> {
        needs_reencode(&self.consumers, self.client_version, codec)
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
        Ok(RequestStep::Forward(upgrade::request_step(
            conn, request, frame,
        )))
    }

    fn on_response(
        &self,
        conn: &Arc<ConnectionContext>,
        request: &mut RequestContext,
        frame: Frame,
    ) -> Result<ResponseStep, HandlerError> {
        match request.kept::<Upgraded>() {
            Some(upgraded) => response::response_step(conn, upgraded.clone(), frame),
            None => addresses::rewrite(conn, request, frame),
        }
    }
}
