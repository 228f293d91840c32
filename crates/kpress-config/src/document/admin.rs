//! `[admin]`: where the HTTP endpoint of metrics, health and the policy in force
//! listens, and what /readyz calls recent.

use std::net::SocketAddr;
use std::time::Duration;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::Walk;
use crate::settings::{AdminSettings, READINESS_WINDOW_SECS_DEFAULT};

pub(super) const KEYS: [&str; 2] = ["bind", "readiness_window_secs"];
/// `[admin] readiness_window_secs`'s range.
const READINESS_WINDOW_SECS_MAX: i64 = 3600;

impl Walk<'_> {
    pub(super) fn admin(
        &mut self,
        table: &DeTable<'_>,
        section: &Spanned<DeValue<'_>>,
    ) -> Option<AdminSettings> {
        let keys = self.known_keys("admin", table, &KEYS);
        let window = match keys.get("readiness_window_secs") {
            Some((_, v)) => self
                .integer_in(
                    "admin.readiness_window_secs",
                    v,
                    1,
                    READINESS_WINDOW_SECS_MAX,
                    &format!("1..{READINESS_WINDOW_SECS_MAX}"),
                )
                .map(|n| n as u64),
            None => Some(READINESS_WINDOW_SECS_DEFAULT),
        };
        let Some((_, value)) = keys.get("bind") else {
            self.missing_key("admin", "bind", section);
            return None;
        };
        let bind = self.socket_addr("admin.bind", value);
        Some(AdminSettings {
            bind: bind?,
            readiness_window: Duration::from_secs(window?),
        })
    }
}

/// Whether two listeners would fight over one port.
pub(super) fn conflicts(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port()
        && a.port() != 0
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::testing::{config, one_problem, HEAD};
    use super::conflicts;

    fn admin(lines: &str) -> String {
        format!("{HEAD}[admin]\n{lines}\n")
    }

    #[test]
    fn bind_and_the_default_readiness_window() {
        let c = config(&admin("bind = \"127.0.0.1:9464\""));
        let settings = c.admin.unwrap();
        assert_eq!(settings.bind.to_string(), "127.0.0.1:9464");
        assert_eq!(settings.readiness_window, Duration::from_secs(30));
        assert!(config(HEAD).admin.is_none());
    }

    #[test]
    fn readiness_window_secs_is_1_to_3600() {
        for secs in [1, 3600] {
            let c = config(&admin(&format!(
                "bind = \"127.0.0.1:9464\"\nreadiness_window_secs = {secs}"
            )));
            assert_eq!(c.admin.unwrap().readiness_window, Duration::from_secs(secs));
        }
        for bad in [0, 3601] {
            assert_eq!(
                one_problem(&admin(&format!(
                    "bind = \"127.0.0.1:9464\"\nreadiness_window_secs = {bad}"
                ))),
                format!(
                    "t.toml:7:25: admin.readiness_window_secs = {bad}: out of range (allowed: 1..3600)"
                )
            );
        }
    }

    #[test]
    fn bind_is_required_and_an_ip_and_port() {
        assert!(one_problem(&admin("readiness_window_secs = 5"))
            .ends_with("admin.bind: missing key in [admin]"));
        assert_eq!(
            one_problem(&admin("bind = \"localhost:9464\"")),
            "t.toml:6:8: admin.bind = \"localhost:9464\": not an IP:port socket address \
             (allowed: IPv4:port or [IPv6]:port, e.g. 127.0.0.1:19092)"
        );
    }

    #[test]
    fn bind_must_not_take_the_listener_port() {
        assert_eq!(
            one_problem(&admin("bind = \"0.0.0.0:19092\"")),
            "t.toml:6:8: admin.bind = \"0.0.0.0:19092\": takes the port of listener.bind \
             (127.0.0.1:19092): give the admin endpoint a port of its own"
        );
    }

    #[test]
    fn an_unknown_key_lists_the_known_ones() {
        assert_eq!(
            one_problem(&admin(
                "bind = \"127.0.0.1:9464\"\nreadiness_window_sec = 5"
            )),
            "t.toml:7:1: admin.readiness_window_sec: unknown key in [admin] \
             (allowed: bind, readiness_window_secs); did you mean readiness_window_secs?"
        );
    }

    #[test]
    fn conflicts_is_one_port_on_overlapping_addresses() {
        let addr = |s: &str| s.parse().unwrap();
        assert!(conflicts(addr("127.0.0.1:9092"), addr("127.0.0.1:9092")));
        assert!(conflicts(addr("0.0.0.0:9092"), addr("127.0.0.1:9092")));
        assert!(conflicts(addr("127.0.0.1:9092"), addr("[::]:9092")));
        assert!(!conflicts(addr("127.0.0.1:9092"), addr("127.0.0.2:9092")));
        assert!(!conflicts(addr("127.0.0.1:9092"), addr("127.0.0.1:9093")));
        // Port 0 is a port the system picks: never the same one twice.
        assert!(!conflicts(addr("127.0.0.1:0"), addr("127.0.0.1:0")));
    }
}
