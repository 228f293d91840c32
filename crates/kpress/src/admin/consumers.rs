//! `/consumers`: the consumers kpress has seen fetch that do not read every codec
//! ([`kpress_proxy::SeenConsumers`]), as JSON for `kpress doctor --admin`.

use kpress_proxy::SeenConsumer;
use serde_json::{json, Value};

/// `{"consumers": [...]}`, the most recently seen first.
pub(crate) fn consumers_json(consumers: &[SeenConsumer]) -> Value {
    let list: Vec<Value> = consumers
        .iter()
        .map(|c| {
            json!({
                "client_id": c.client_id,
                "software_name": c.software.as_ref().map(|s| s.name()),
                "software_version": c.software.as_ref().map(|s| s.version()),
                "listener": c.listener,
                "max_fetch_version": c.max_fetch_version,
                "reads": c.reads.iter().map(|codec| codec.name()).collect::<Vec<_>>(),
                "handling": c.handling.as_str(),
                "fetches": c.fetches,
                "topics": c.topics.iter().map(|t| &**t).collect::<Vec<&str>>(),
            })
        })
        .collect();
    json!({ "consumers": list })
}
