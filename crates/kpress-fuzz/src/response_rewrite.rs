//! `response_rewrite`: every response kpress rewrites (broker addresses, topic ids,
//! ApiVersions caps), on arbitrary bodies.

use kpress_protocol::{api_key, rewrite_response, rewrites_response, ResponseObserver};

/// Input: the API key (one byte), the API version (one byte), then the response
/// body as it follows the response header.
///
/// Invariants: no panic. When the rewrite returns a body: kpress reads it back and
/// rewriting it again changes nothing (it returns `None` or the same bytes), the
/// second pass meets as many brokers as the first and only at addresses the observer
/// handed out, so no address the broker named survives. When it returns `None`, every
/// address it met already was the one the observer hands out.
pub fn response_rewrite(data: &[u8]) {
    let [key, version, body @ ..] = data else {
        return;
    };
    let (key, version) = (i16::from(*key), i16::from(*version));
    if !rewrites_response(key, version) {
        return;
    }
    let mut first = Observer::default();
    let Ok(rewritten) = rewrite_response(key, version, body, &mut first) else {
        return;
    };
    let Some(rewritten) = rewritten else {
        assert!(
            first
                .met
                .iter()
                .zip(&first.handed_out)
                .all(|(met, out)| met == out),
            "a response that names brokers {:?} was relayed unchanged",
            first.met
        );
        return;
    };
    let mut second = Observer::default();
    let again = rewrite_response(key, version, &rewritten, &mut second)
        .unwrap_or_else(|e| panic!("kpress cannot read its own rewrite of {key} v{version}: {e}"));
    if let Some(again) = again {
        assert!(
            again == rewritten,
            "rewriting {key} v{version} a second time changed it again"
        );
    }
    assert_eq!(
        second.met.len(),
        first.met.len(),
        "the rewrite of {key} v{version} names another number of brokers"
    );
    for address in &second.met {
        assert!(
            first.handed_out.contains(address),
            "broker address {address:?} survived the rewrite of {key} v{version}"
        );
    }
}

/// Hands out `kpress-<node>.fuzz:<19000 + node mod 1000>` for every broker, caps
/// Produce at v12 (as a proxy without topic-id names would), and remembers both.
#[derive(Debug, Default)]
struct Observer {
    met: Vec<(String, i32)>,
    handed_out: Vec<(String, i32)>,
}

impl ResponseObserver for Observer {
    fn broker(&mut self, node_id: i32, host: &str, port: i32) -> (String, i32) {
        self.met.push((host.to_owned(), port));
        let address = (
            format!("kpress-{node_id}.fuzz"),
            19_000 + node_id.rem_euclid(1000),
        );
        self.handed_out.push(address.clone());
        address
    }

    fn topic(&mut self, _id: [u8; 16], _name: &str) {}

    fn max_version(&mut self, api_key: i16, capped_max: i16) -> i16 {
        if api_key == api_key::PRODUCE {
            capped_max.min(12)
        } else {
            capped_max
        }
    }
}
