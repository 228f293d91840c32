//! `[listener]` and `[listener.tls]`: where clients connect, how nodes are told apart,
//! and TLS from clients.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::Range;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::{Entry, Walk, FILE_START};
use crate::host_name::{check_dns_name, HostPattern, DNS_NAME_ALLOWED};
use crate::settings::{ClientAuth, ListenerSettings, ListenerTls, NodeRouting, TlsVersion};

pub(super) const KEYS: [&str; 10] = [
    "bind",
    "mode",
    "advertised_host",
    "node_port_base",
    "advertised_host_pattern",
    "bootstrap_host",
    "advertised_port",
    "rewrite_before_auth",
    "reuse_port",
    "tls",
];

/// Keys of ports mode, with why each does not apply in sni mode.
const PORTS_ONLY: [(&str, &str); 2] = [
    (
        "advertised_host",
        "does not apply in sni mode, which names each node by listener.advertised_host_pattern",
    ),
    (
        "node_port_base",
        "does not apply in sni mode, which serves every node on listener.bind's port",
    ),
];
const SNI_ONLY: [&str; 3] = [
    "advertised_host_pattern",
    "bootstrap_host",
    "advertised_port",
];

/// `node_port_base` unset: broker node N is served on `bind`'s port + 100 + N (a
/// bind on Kafka's usual 9092 serves node N on 9192 + N).
pub(crate) const NODE_PORT_OFFSET: u16 = 100;

/// This machine's host name (Linux's, else `/etc/hostname`), for a wildcard bind's
/// `advertised_host`; `None` when neither names one.
fn this_host_name() -> Option<String> {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .into_iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .map(|text| text.trim().to_owned())
        .find(|name| !name.is_empty() && !name.contains(char::is_whitespace))
}

pub(super) const TLS_KEYS: [&str; 5] = ["cert", "key", "client_ca", "client_auth", "min_version"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Ports,
    Sni,
}

const MODES: [(&str, Mode); 2] = [("ports", Mode::Ports), ("sni", Mode::Sni)];

type Keys<'a, 'i> = HashMap<String, Entry<'a, 'i>>;

impl Walk<'_> {
    /// `upstream_sasl`: `[upstream.sasl]` is in the file, which declares a SASL cluster.
    pub(super) fn listener(
        &mut self,
        table: &DeTable<'_>,
        section: &Spanned<DeValue<'_>>,
        upstream_sasl: bool,
    ) -> Option<ListenerSettings> {
        let keys = self.known_keys("listener", table, &KEYS);
        let bind = match keys.get("bind") {
            Some((_, v)) => self.socket_addr("listener.bind", v),
            None => {
                self.missing_key("listener", "bind", section);
                None
            }
        };
        let mode = match keys.get("mode") {
            Some((_, v)) => self.choice("listener.mode", v, "listener mode", &MODES),
            None => Some(Mode::Ports),
        };
        // `Some(None)`: no [listener.tls]; `None`: one with problems.
        let tls = match keys.get("tls") {
            Some((_, v)) => self
                .subtable("listener.tls", v)
                .and_then(|t| self.listener_tls(t, v))
                .map(Some),
            None => Some(None),
        };
        let rewrite_before_auth = match keys.get("rewrite_before_auth") {
            Some((_, v)) => self.boolean("listener.rewrite_before_auth", v),
            None => Some(!upstream_sasl),
        };
        let reuse_port = match keys.get("reuse_port") {
            Some((_, v)) => self.boolean("listener.reuse_port", v),
            None => Some(false),
        };
        let routing = match mode? {
            Mode::Ports => self.ports_routing(&keys, bind, section),
            Mode::Sni => {
                let mode_span = keys.get("mode").map_or(FILE_START, |(_, v)| v.span());
                self.sni_routing(&keys, bind, &mode_span)
            }
        };
        Some(ListenerSettings {
            bind: bind?,
            routing: routing?,
            tls: tls?,
            rewrite_before_auth: rewrite_before_auth?,
            reuse_port: reuse_port?,
        })
    }

    fn ports_routing(
        &mut self,
        keys: &Keys<'_, '_>,
        bind: Option<SocketAddr>,
        section: &Spanned<DeValue<'_>>,
    ) -> Option<NodeRouting> {
        let mut ok = true;
        for name in SNI_ONLY {
            if let Some((key, value)) = keys.get(name) {
                self.sink.report(
                    &key.span(),
                    Some(&format!("listener.{name}")),
                    Some(&value.span()),
                    "applies only in sni mode (listener.mode = \"sni\"); in ports mode, the default, \
                     each node is served on a port of its own",
                    None,
                );
                ok = false;
            }
        }
        let node_port_base = match keys.get("node_port_base") {
            Some((_, v)) => self
                .integer_in("listener.node_port_base", v, 1, u16::MAX.into(), "1..65535")
                .map(|p| p as u16),
            None => bind.and_then(|bind| {
                let at = keys.get("bind").map_or(section.span(), |(_, v)| v.span());
                self.default_node_port_base(bind, &at)
            }),
        };
        let advertised_host = match keys.get("advertised_host") {
            Some((_, v)) => self.string("listener.advertised_host", v).and_then(|host| {
                if host.is_empty() || host.contains(char::is_whitespace) {
                    self.sink.bad_value(
                        "listener.advertised_host",
                        &v.span(),
                        "must be a host name or IP address without spaces",
                        None,
                    );
                    None
                } else {
                    Some(host.to_owned())
                }
            }),
            // Clients can reach the bind address itself unless it is a wildcard; then
            // this machine's name is the best guess of what they can reach.
            None => match bind {
                Some(b) if !b.ip().is_unspecified() => Some(b.ip().to_string()),
                Some(b) => match this_host_name() {
                    Some(name) => Some(name),
                    None => {
                        let at = keys.get("bind").map_or(FILE_START, |(_, v)| v.span());
                        self.sink.report(
                            &at,
                            Some("listener.advertised_host"),
                            None,
                            format!(
                                "missing: listener.bind is the wildcard {}, and this host's name \
                                 cannot be read, so clients need a host to be sent to",
                                b.ip()
                            ),
                            None,
                        );
                        None
                    }
                },
                None => None,
            },
        };
        let routing = NodeRouting::Ports {
            advertised_host: advertised_host?,
            node_port_base: node_port_base?,
        };
        ok.then_some(routing)
    }

    /// `node_port_base` unset: [`NODE_PORT_OFFSET`] above `bind`'s port, so node ids
    /// from 0 up never land on the bootstrap port itself.
    fn default_node_port_base(&mut self, bind: SocketAddr, at: &Range<usize>) -> Option<u16> {
        let why = if bind.port() == 0 {
            "listener.bind's port is 0 (chosen by the system at start), so node_port_base \
             has no default"
                .to_owned()
        } else {
            match bind.port().checked_add(NODE_PORT_OFFSET) {
                Some(base) => return Some(base),
                None => format!(
                    "the default, listener.bind's port + {NODE_PORT_OFFSET} = {}, is past 65535",
                    u32::from(bind.port()) + u32::from(NODE_PORT_OFFSET)
                ),
            }
        };
        self.sink.report(
            at,
            Some("listener.node_port_base"),
            None,
            format!("missing: {why}; set node_port_base (broker node N is served on node_port_base + N)"),
            Some("1..65535".to_owned()),
        );
        None
    }

    /// `mode_span`: where `mode = "sni"` is written, the place of what sni mode lacks.
    fn sni_routing(
        &mut self,
        keys: &Keys<'_, '_>,
        bind: Option<SocketAddr>,
        mode_span: &Range<usize>,
    ) -> Option<NodeRouting> {
        let mut ok = true;
        for (name, why) in PORTS_ONLY {
            if let Some((key, value)) = keys.get(name) {
                self.sink.report(
                    &key.span(),
                    Some(&format!("listener.{name}")),
                    Some(&value.span()),
                    format!("{why} (remove it, or set listener.mode = \"ports\")"),
                    None,
                );
                ok = false;
            }
        }
        if !keys.contains_key("tls") {
            self.sink.bad_value(
                "listener.mode",
                mode_span,
                "needs [listener.tls]: nodes are told apart by the server name (SNI) clients send \
                 in the TLS handshake, so sni mode exists only with TLS",
                None,
            );
            ok = false;
        }
        let pattern = match keys.get("advertised_host_pattern") {
            Some((_, v)) => self.host_pattern(v),
            None => {
                self.sink.report(
                    mode_span,
                    Some("listener.advertised_host_pattern"),
                    None,
                    "missing: sni mode names each broker node by it, e.g. \
                     \"broker-{node}.kafka.example.com\"",
                    None,
                );
                None
            }
        };
        let bootstrap_host = match keys.get("bootstrap_host") {
            Some((_, v)) => self.bootstrap_host(v, pattern.as_ref()).map(Some),
            None => Some(None),
        };
        let advertised_port = match keys.get("advertised_port") {
            Some((_, v)) => self
                .integer_in(
                    "listener.advertised_port",
                    v,
                    1,
                    u16::MAX.into(),
                    "1..65535",
                )
                .map(|p| p as u16),
            None => match bind {
                Some(b) if b.port() != 0 => Some(b.port()),
                Some(_) => {
                    let at = keys.get("bind").map_or(FILE_START, |(_, v)| v.span());
                    self.sink.report(
                        &at,
                        Some("listener.advertised_port"),
                        None,
                        "missing: listener.bind's port is 0 (any free port), so clients need a port to be sent to",
                        Some("1..65535".to_owned()),
                    );
                    None
                }
                None => None,
            },
        };
        let routing = NodeRouting::Sni {
            advertised_host_pattern: pattern?,
            bootstrap_host: bootstrap_host?,
            advertised_port: advertised_port?,
        };
        ok.then_some(routing)
    }

    fn host_pattern(&mut self, value: &Spanned<DeValue<'_>>) -> Option<HostPattern> {
        const KEY: &str = "listener.advertised_host_pattern";
        let text = self.string(KEY, value)?;
        match HostPattern::new(text) {
            Ok(pattern) => Some(pattern),
            Err(e) => {
                self.sink.bad_value(
                    KEY,
                    &value.span(),
                    e.to_string(),
                    Some(format!(
                        "a DNS name with {{node}} once, where the node id goes: {DNS_NAME_ALLOWED}"
                    )),
                );
                None
            }
        }
    }

    /// `pattern`: the node names, which the bootstrap's must not be one of (`None`
    /// when the pattern has problems of its own).
    fn bootstrap_host(
        &mut self,
        value: &Spanned<DeValue<'_>>,
        pattern: Option<&HostPattern>,
    ) -> Option<String> {
        const KEY: &str = "listener.bootstrap_host";
        let name = self.string(KEY, value)?;
        if let Err(e) = check_dns_name(name) {
            self.sink.bad_value(
                KEY,
                &value.span(),
                e.to_string(),
                Some(DNS_NAME_ALLOWED.to_owned()),
            );
            return None;
        }
        if let Some(node) = pattern.and_then(|p| p.node_id(name)) {
            self.sink.bad_value(
                KEY,
                &value.span(),
                format!(
                    "is the name listener.advertised_host_pattern gives broker node {node}: \
                     the bootstrap needs a name of its own"
                ),
                None,
            );
            return None;
        }
        Some(name.to_owned())
    }

    fn listener_tls(
        &mut self,
        table: &DeTable<'_>,
        section: &Spanned<DeValue<'_>>,
    ) -> Option<ListenerTls> {
        const SECTION: &str = "listener.tls";
        let keys = self.known_keys(SECTION, table, &TLS_KEYS);
        let required = |walk: &mut Self, name: &str| match keys.get(name) {
            Some((_, v)) => walk.file_path(&format!("{SECTION}.{name}"), v),
            None => {
                walk.missing_key(SECTION, name, section);
                None
            }
        };
        let cert = required(self, "cert");
        let key = required(self, "key");
        // `Some(None)`: no client_ca; `None`: one with problems.
        let client_ca = match keys.get("client_ca") {
            Some((_, v)) => self.file_path("listener.tls.client_ca", v).map(Some),
            None => Some(None),
        };
        let client_auth = match keys.get("client_auth") {
            Some((_, v)) if !keys.contains_key("client_ca") => {
                self.sink.bad_value(
                    "listener.tls.client_auth",
                    &v.span(),
                    "needs listener.tls.client_ca: client certificates are checked against that CA",
                    None,
                );
                None
            }
            Some((_, v)) => self.choice(
                "listener.tls.client_auth",
                v,
                "client_auth",
                &[
                    ("required", ClientAuth::Required),
                    ("requested", ClientAuth::Requested),
                ],
            ),
            None if keys.contains_key("client_ca") => Some(ClientAuth::Required),
            None => Some(ClientAuth::None),
        };
        let min_version = match keys.get("min_version") {
            Some((_, v)) => self.choice(
                "listener.tls.min_version",
                v,
                "TLS version",
                &[("1.2", TlsVersion::Tls12), ("1.3", TlsVersion::Tls13)],
            ),
            None => Some(TlsVersion::Tls12),
        };
        Some(ListenerTls {
            cert: cert?,
            key: key?,
            client_ca: client_ca?,
            client_auth: client_auth?,
            min_version: min_version?,
        })
    }
}
