//! `[upstream]`, `[upstream.tls]` and `[upstream.sasl]`: the brokers, TLS to them, and
//! kpress's own credentials.

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::{Walk, FILE_START};
use crate::host_name::{check_dns_name, DNS_NAME_ALLOWED};
use crate::settings::{PasswordSource, SaslMechanism, UpstreamSasl, UpstreamSettings, UpstreamTls};

pub(super) const KEYS: [&str; 3] = ["bootstrap_servers", "tls", "sasl"];
pub(super) const TLS_KEYS: [&str; 5] = ["ca", "cert", "key", "server_name", "verify"];
pub(super) const SASL_KEYS: [&str; 4] = ["mechanism", "username", "password_file", "password_env"];

/// Why `upstream.sasl.password` is refused.
const PASSWORD_REFUSED: &str =
    "a password is not taken from the policy file: whoever can read the \
     policy could read it, and it would end up in backups and in git; put it in a file named by \
     password_file, or an environment variable named by password_env";

impl Walk<'_> {
    pub(super) fn upstream(
        &mut self,
        table: &DeTable<'_>,
        section: &Spanned<DeValue<'_>>,
    ) -> Option<UpstreamSettings> {
        let keys = self.known_keys("upstream", table, &KEYS);
        let servers = match keys.get("bootstrap_servers") {
            Some((_, v)) => self.bootstrap_servers(v),
            None => {
                self.missing_key("upstream", "bootstrap_servers", section);
                None
            }
        };
        // `Some(None)`: no such table; `None`: one with problems.
        let tls = match keys.get("tls") {
            Some((_, v)) => self
                .subtable("upstream.tls", v)
                .and_then(|t| self.upstream_tls(t))
                .map(Some),
            None => Some(None),
        };
        let sasl = match keys.get("sasl") {
            Some((_, v)) => self
                .subtable("upstream.sasl", v)
                .and_then(|t| self.upstream_sasl(t, v))
                .map(Some),
            None => Some(None),
        };
        Some(UpstreamSettings {
            bootstrap_servers: servers?,
            tls: tls?,
            sasl: sasl?,
        })
    }

    fn bootstrap_servers(&mut self, value: &Spanned<DeValue<'_>>) -> Option<Vec<String>> {
        const KEY: &str = "upstream.bootstrap_servers";
        let DeValue::Array(items) = value.get_ref() else {
            self.sink.bad_value(
                KEY,
                &value.span(),
                format!(
                    "must be an array of \"host:port\" strings, not {}",
                    value.get_ref().type_str()
                ),
                None,
            );
            return None;
        };
        if items.is_empty() {
            self.sink
                .bad_value(KEY, &value.span(), "needs at least one \"host:port\"", None);
            return None;
        }
        let mut servers = Vec::with_capacity(items.len());
        let mut all_ok = true;
        for item in items.iter() {
            match self.string(KEY, item) {
                Some(s) if is_host_port(s) => servers.push(s.to_owned()),
                Some(_) => {
                    self.sink.bad_value(
                        KEY,
                        &item.span(),
                        "not a \"host:port\" address",
                        Some("host:port with port 1..65535, [IPv6]:port".to_owned()),
                    );
                    all_ok = false;
                }
                None => all_ok = false,
            }
        }
        all_ok.then_some(servers)
    }

    /// An empty `[upstream.tls]` is TLS with the system's roots.
    fn upstream_tls(&mut self, table: &DeTable<'_>) -> Option<UpstreamTls> {
        const SECTION: &str = "upstream.tls";
        let keys = self.known_keys(SECTION, table, &TLS_KEYS);
        let file = |walk: &mut Self, name: &str| match keys.get(name) {
            Some((_, v)) => walk.file_path(&format!("{SECTION}.{name}"), v).map(Some),
            None => Some(None),
        };
        let ca = file(self, "ca");
        let cert = file(self, "cert");
        let key = file(self, "key");
        // mTLS takes both; one alone is a half-made setting, not a choice.
        let pair_ok = match (keys.get("cert"), keys.get("key")) {
            (Some(_), Some(_)) | (None, None) => true,
            (one, _) => {
                let (present, absent) = if one.is_some() {
                    ("cert", "key")
                } else {
                    ("key", "cert")
                };
                let at = keys.get(present).map_or(FILE_START, |(k, _)| k.span());
                self.sink.report(
                    &at,
                    Some(&format!("{SECTION}.{present}")),
                    None,
                    format!(
                        "needs {SECTION}.{absent} too: a client certificate for brokers (mTLS) \
                         takes the certificate and its private key"
                    ),
                    None,
                );
                false
            }
        };
        let client_cert = match (cert, key) {
            (Some(Some(cert)), Some(Some(key))) => Some(Some((cert, key))),
            (Some(None), Some(None)) => Some(None),
            _ => None,
        };
        let server_name = match keys.get("server_name") {
            Some((_, v)) => self.server_name(v).map(Some),
            None => Some(None),
        };
        let verify = match keys.get("verify") {
            Some((_, v)) => self.boolean("upstream.tls.verify", v),
            None => Some(true),
        };
        if !pair_ok {
            return None;
        }
        Some(UpstreamTls {
            ca: ca?,
            client_cert: client_cert?,
            server_name: server_name?,
            verify: verify?,
        })
    }

    fn server_name(&mut self, value: &Spanned<DeValue<'_>>) -> Option<String> {
        const KEY: &str = "upstream.tls.server_name";
        let name = self.string(KEY, value)?;
        if name.parse::<std::net::IpAddr>().is_ok() {
            return Some(name.to_owned());
        }
        match check_dns_name(name) {
            Ok(()) => Some(name.to_owned()),
            Err(e) => {
                self.sink.bad_value(
                    KEY,
                    &value.span(),
                    format!("not an IP address, and {e}"),
                    Some(format!("an IP address, or a DNS name: {DNS_NAME_ALLOWED}")),
                );
                None
            }
        }
    }

    fn upstream_sasl(
        &mut self,
        table: &DeTable<'_>,
        section: &Spanned<DeValue<'_>>,
    ) -> Option<UpstreamSasl> {
        const SECTION: &str = "upstream.sasl";
        let keys = self.known_keys_refusing(
            SECTION,
            table,
            &SASL_KEYS,
            &[("password", PASSWORD_REFUSED)],
        );
        let mechanisms: Vec<(&str, SaslMechanism)> =
            SaslMechanism::ALL.iter().map(|m| (m.name(), *m)).collect();
        let mechanism = match keys.get("mechanism") {
            Some((_, v)) => {
                self.choice("upstream.sasl.mechanism", v, "SASL mechanism", &mechanisms)
            }
            None => {
                self.missing_key(SECTION, "mechanism", section);
                None
            }
        };
        let username = match keys.get("username") {
            Some((_, v)) => self.name_text("upstream.sasl.username", v),
            None => {
                self.missing_key(SECTION, "username", section);
                None
            }
        };
        let password = match (keys.get("password_file"), keys.get("password_env")) {
            (Some((_, file)), None) => self
                .file_path("upstream.sasl.password_file", file)
                .map(PasswordSource::File),
            (None, Some((_, env))) => self.env_name(env).map(PasswordSource::Env),
            (Some((first, _)), Some((second, _))) => {
                // Reported at whichever comes second in the file.
                let later = if first.span().start < second.span().start {
                    second
                } else {
                    first
                };
                self.sink.report(
                    &later.span(),
                    Some(&format!("{SECTION}.{}", later.get_ref())),
                    None,
                    "set only one of password_file and password_env: which one would be the password?",
                    None,
                );
                None
            }
            (None, None) => {
                let at = section.span().start;
                // Without a password key, a refused `password` is the only problem worth
                // reading: the refusal already says what to write instead.
                if !table.contains_key("password") {
                    self.sink.report(
                        &(at..at),
                        Some("upstream.sasl.password_file"),
                        None,
                        "missing key in [upstream.sasl]: kpress reads its password from a file \
                         (password_file) or an environment variable (password_env)",
                        None,
                    );
                }
                None
            }
        };
        Some(UpstreamSasl {
            mechanism: mechanism?,
            username: username?,
            password: password?,
        })
    }

    /// `password_env`: a name a shell can export.
    fn env_name(&mut self, value: &Spanned<DeValue<'_>>) -> Option<String> {
        const KEY: &str = "upstream.sasl.password_env";
        let name = self.string(KEY, value)?;
        let mut chars = name.chars();
        let valid = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if valid {
            Some(name.to_owned())
        } else {
            self.sink.bad_value(
                KEY,
                &value.span(),
                "not an environment variable name",
                Some("letters, digits and '_', not starting with a digit".to_owned()),
            );
            None
        }
    }
}

/// `host:port` or `[v6]:port` with a port in 1..=65535.
fn is_host_port(s: &str) -> bool {
    let Some((host, port)) = s.rsplit_once(':') else {
        return false;
    };
    let host_ok = if let Some(inner) = host.strip_prefix('[') {
        inner
            .strip_suffix(']')
            .is_some_and(|v6| v6.parse::<std::net::Ipv6Addr>().is_ok())
    } else {
        !host.is_empty() && !host.contains(|c: char| c.is_whitespace() || c == ':' || c == '/')
    };
    host_ok && port.parse::<u16>().is_ok_and(|p| p > 0)
}
