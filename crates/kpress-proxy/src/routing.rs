//! Which broker node a client connection is for, in SNI mode: the TLS server name
//! the client asked for, read against `advertised_host_pattern` and `bootstrap_host`.

use kpress_config::{HostPattern, NodeRouting};

/// Single-port routing by the SNI name of each TLS connection.
#[derive(Debug, Clone)]
pub(crate) struct SniRouting {
    pattern: HostPattern,
    bootstrap_host: Option<String>,
}

/// Where an SNI name leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SniRoute {
    Bootstrap,
    Node(i32),
    /// Neither the bootstrap's name nor a node's: refused.
    Unknown,
}

impl SniRouting {
    /// The SNI routing of `routing`, if it routes by name.
    pub(crate) fn of(routing: &NodeRouting) -> Option<SniRouting> {
        match routing {
            NodeRouting::Sni {
                advertised_host_pattern,
                bootstrap_host,
                ..
            } => Some(SniRouting {
                pattern: advertised_host_pattern.clone(),
                bootstrap_host: bootstrap_host.clone(),
            }),
            NodeRouting::Ports { .. } => None,
        }
    }

    /// The route of a connection that named `server_name` (`None`: no SNI, as clients
    /// connecting to an IP address send). Names compare case-insensitively, as DNS does.
    pub(crate) fn route(&self, server_name: Option<&str>) -> SniRoute {
        let Some(name) = server_name else {
            return SniRoute::Bootstrap;
        };
        if self
            .bootstrap_host
            .as_deref()
            .is_some_and(|b| b.eq_ignore_ascii_case(name))
        {
            return SniRoute::Bootstrap;
        }
        match self.pattern.node_id(name) {
            Some(id) => SniRoute::Node(id),
            None => SniRoute::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sni(bootstrap_host: Option<&str>) -> SniRouting {
        SniRouting::of(&NodeRouting::Sni {
            advertised_host_pattern: HostPattern::new("broker-{node}.kafka.example.com").unwrap(),
            bootstrap_host: bootstrap_host.map(str::to_owned),
            advertised_port: 9092,
        })
        .unwrap()
    }

    #[test]
    fn names_route_to_their_node_or_the_bootstrap() {
        let sni = sni(Some("bootstrap.kafka.example.com"));
        assert_eq!(
            sni.route(Some("broker-3.kafka.example.com")),
            SniRoute::Node(3)
        );
        assert_eq!(
            sni.route(Some("BROKER-12.Kafka.Example.com")),
            SniRoute::Node(12)
        );
        assert_eq!(
            sni.route(Some("Bootstrap.kafka.example.com")),
            SniRoute::Bootstrap
        );
        assert_eq!(sni.route(None), SniRoute::Bootstrap);
        for name in [
            "broker-03.kafka.example.com",
            "broker-3.kafka.example.com.evil.net",
            "evil.net",
            "127.0.0.1",
            "",
        ] {
            assert_eq!(sni.route(Some(name)), SniRoute::Unknown, "{name}");
        }
    }

    #[test]
    fn without_a_bootstrap_name_only_connections_without_sni_reach_the_bootstrap() {
        let sni = sni(None);
        assert_eq!(
            sni.route(Some("bootstrap.kafka.example.com")),
            SniRoute::Unknown
        );
        assert_eq!(sni.route(None), SniRoute::Bootstrap);
    }
}
