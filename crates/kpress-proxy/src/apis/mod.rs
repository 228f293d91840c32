//! kpress's own handlers, one module per behaviour: Produce recompression
//! ([`produce`]), zstd re-encoded for consumers that cannot read it ([`fetch`]), the
//! ApiVersions answer and cap ([`api_versions`]), the refusal of SaslHandshake v0
//! ([`sasl_handshake`]), and broker address rewriting in every response that carries
//! node addresses ([`addresses`]).

mod addresses;
mod api_versions;
pub(crate) mod fetch;
mod log_limiter;
pub(crate) mod metrics;
pub(crate) mod produce;
mod sasl_handshake;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use kpress_protocol::api_key;

use crate::handler::Handlers;

impl Handlers {
    /// kpress's own handlers: Produce (recompression), Fetch (zstd re-encoded for
    /// consumers that cannot read it), ApiVersions (answer and cap),
    /// SaslHandshake (v0 refused), and broker address rewriting in every response
    /// that carries node addresses.
    pub fn kpress() -> Handlers {
        let mut handlers = Handlers::none();
        for (key, facts) in kpress_protocol::api::all() {
            if facts.node_addresses_from.is_some() {
                handlers.set(key, Arc::new(addresses::NodeAddresses));
            }
        }
        handlers.set(api_key::API_VERSIONS, Arc::new(api_versions::ApiVersions));
        handlers.set(
            api_key::SASL_HANDSHAKE,
            Arc::new(sasl_handshake::SaslHandshake),
        );
        handlers.set(api_key::PRODUCE, Arc::new(produce::Produce));
        handlers.set(api_key::FETCH, Arc::new(fetch::Fetch));
        handlers
    }
}
