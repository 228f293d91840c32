//! `[upstream]`, `[upstream.tls]` and `[upstream.sasl]`: the brokers, TLS to them, and
//! kpress's own credentials.

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use std::collections::HashMap;
use std::time::Duration;

use super::{Entry, Walk, FILE_START};
use crate::host_name::{check_dns_name, DNS_NAME_ALLOWED};
use crate::settings::{
    BearerTokenSource, PasswordSource, SaslMechanism, UpstreamSasl, UpstreamSettings, UpstreamTls,
    TOPIC_CONFIG_REFRESH_MS_DEFAULT,
};

pub(super) const KEYS: [&str; 4] = [
    "bootstrap_servers",
    "topic_config_refresh_ms",
    "tls",
    "sasl",
];
/// `[upstream] topic_config_refresh_ms`'s range.
const TOPIC_CONFIG_REFRESH_MS_MIN: i64 = 1_000;
const TOPIC_CONFIG_REFRESH_MS_MAX: i64 = 3_600_000;
pub(super) const TLS_KEYS: [&str; 5] = ["ca", "cert", "key", "server_name", "verify"];
pub(super) const SASL_KEYS: [&str; 12] = [
    "mechanism",
    "username",
    "password_file",
    "password_env",
    "token_endpoint_url",
    "client_id",
    "client_secret_file",
    "client_secret_env",
    "scope",
    "token_file",
    "token_provider",
    "region",
];

/// The keys of a username/password login, which OAUTHBEARER does not take.
const PASSWORD_LOGIN_KEYS: [&str; 3] = ["username", "password_file", "password_env"];
/// The keys of an OAUTHBEARER login, which PLAIN and SCRAM do not take.
const BEARER_KEYS: [&str; 8] = [
    "token_endpoint_url",
    "client_id",
    "client_secret_file",
    "client_secret_env",
    "scope",
    "token_file",
    "token_provider",
    "region",
];
/// `token_provider` values.
const TOKEN_PROVIDERS: [(&str, TokenProvider); 1] = [("aws_msk_iam", TokenProvider::AwsMskIam)];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TokenProvider {
    AwsMskIam,
}

/// What `[upstream.sasl]` configures.
enum SaslSection {
    Password(UpstreamSasl),
    Bearer(BearerTokenSource),
}

/// Why `upstream.sasl.client_secret` and `upstream.sasl.token` are refused.
const SECRET_REFUSED: &str =
    "a secret is not taken from the policy file: whoever can read the policy could read \
     it, and it would end up in backups and in git; name a file (client_secret_file, \
     token_file) or an environment variable (client_secret_env) instead";

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
        let refresh = match keys.get("topic_config_refresh_ms") {
            Some((_, v)) => self
                .integer_in(
                    "upstream.topic_config_refresh_ms",
                    v,
                    TOPIC_CONFIG_REFRESH_MS_MIN,
                    TOPIC_CONFIG_REFRESH_MS_MAX,
                    &format!("{TOPIC_CONFIG_REFRESH_MS_MIN}..{TOPIC_CONFIG_REFRESH_MS_MAX}"),
                )
                .map(|ms| Duration::from_millis(ms as u64)),
            None => Some(Duration::from_millis(TOPIC_CONFIG_REFRESH_MS_DEFAULT)),
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
        let (sasl, oauthbearer) = match sasl? {
            None => (None, None),
            Some(SaslSection::Password(login)) => (Some(login), None),
            Some(SaslSection::Bearer(source)) => (None, Some(source)),
        };
        Some(UpstreamSettings {
            bootstrap_servers: servers?,
            topic_config_refresh: refresh?,
            tls: tls?,
            sasl,
            oauthbearer,
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
    ) -> Option<SaslSection> {
        const SECTION: &str = "upstream.sasl";
        let keys = self.known_keys_refusing(
            SECTION,
            table,
            &SASL_KEYS,
            &[
                ("password", PASSWORD_REFUSED),
                ("client_secret", SECRET_REFUSED),
                ("token", SECRET_REFUSED),
            ],
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
        let (own, others) = if mechanism == Some(SaslMechanism::OAuthBearer) {
            (&BEARER_KEYS[..], &PASSWORD_LOGIN_KEYS[..])
        } else {
            (&PASSWORD_LOGIN_KEYS[..], &BEARER_KEYS[..])
        };
        let mut foreign = false;
        // With no mechanism understood there is no telling which keys are foreign.
        let others = if mechanism.is_some() { others } else { &[][..] };
        for name in others {
            if let Some((key, _)) = keys.get(*name) {
                let mechanisms = if own.contains(&"username") {
                    "mechanism = \"OAUTHBEARER\""
                } else {
                    "PLAIN and SCRAM mechanisms"
                };
                self.sink.report(
                    &key.span(),
                    Some(&format!("{SECTION}.{name}")),
                    None,
                    format!(
                        "only for {mechanisms}, not {}",
                        mechanism.map_or("", |m| m.name())
                    ),
                    None,
                );
                foreign = true;
            }
        }
        if mechanism == Some(SaslMechanism::OAuthBearer) {
            let source = self.bearer_source(&keys, section);
            return if foreign {
                None
            } else {
                source.map(SaslSection::Bearer)
            };
        }
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
            (None, Some((_, env))) => self
                .env_name_of("upstream.sasl.password_env", env)
                .map(PasswordSource::Env),
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
        if foreign {
            return None;
        }
        Some(SaslSection::Password(UpstreamSasl {
            mechanism: mechanism?,
            username: username?,
            password: password?,
        }))
    }

    /// OAUTHBEARER's token source: exactly one of `token_endpoint_url` (with
    /// `client_id` and one of `client_secret_file`/`client_secret_env`, `scope`
    /// optional), `token_file` and `token_provider` (with `region`).
    fn bearer_source(
        &mut self,
        keys: &HashMap<String, Entry<'_, '_>>,
        section: &Spanned<DeValue<'_>>,
    ) -> Option<BearerTokenSource> {
        const SECTION: &str = "upstream.sasl";
        const SOURCES: [&str; 3] = ["token_endpoint_url", "token_file", "token_provider"];
        let given: Vec<&str> = SOURCES
            .into_iter()
            .filter(|name| keys.contains_key(*name))
            .collect();
        let mut ok = true;
        // Keys that belong to a source other than the one given.
        let belongs = [
            ("client_id", "token_endpoint_url"),
            ("client_secret_file", "token_endpoint_url"),
            ("client_secret_env", "token_endpoint_url"),
            ("scope", "token_endpoint_url"),
            ("region", "token_provider"),
        ];
        for (name, source) in belongs {
            if let Some((key, _)) = keys.get(name) {
                if !keys.contains_key(source) {
                    self.sink.report(
                        &key.span(),
                        Some(&format!("{SECTION}.{name}")),
                        None,
                        format!("only with {SECTION}.{source}"),
                        None,
                    );
                    ok = false;
                }
            }
        }
        let source = match given.as_slice() {
            [] => {
                let at = section.span().start;
                self.sink.report(
                    &(at..at),
                    Some("upstream.sasl.token_endpoint_url"),
                    None,
                    "missing key in [upstream.sasl]: OAUTHBEARER takes its tokens from a token \
                     endpoint (token_endpoint_url, client_id, client_secret_file or \
                     client_secret_env), a file (token_file) or a provider (token_provider)",
                    None,
                );
                return None;
            }
            [one] => *one,
            [_, second, ..] => {
                let (key, _) = keys[*second];
                self.sink.report(
                    &key.span(),
                    Some(&format!("{SECTION}.{second}")),
                    None,
                    format!(
                        "set only one of {}: which one would give the tokens?",
                        SOURCES.join(", ")
                    ),
                    None,
                );
                return None;
            }
        };
        let value = |name: &str| keys.get(name).map(|(_, v)| *v);
        let found = match source {
            "token_file" => self
                .file_path("upstream.sasl.token_file", value("token_file")?)
                .map(BearerTokenSource::TokenFile),
            "token_provider" => {
                let provider = self.choice(
                    "upstream.sasl.token_provider",
                    value("token_provider")?,
                    "token provider",
                    &TOKEN_PROVIDERS,
                );
                let region = match value("region") {
                    Some(v) => self.aws_region(v),
                    None => {
                        self.missing_key(SECTION, "region", section);
                        None
                    }
                };
                match (provider?, region?) {
                    (TokenProvider::AwsMskIam, region) => {
                        Some(BearerTokenSource::AwsMskIam { region })
                    }
                }
            }
            _ => {
                let url = self.http_url(
                    "upstream.sasl.token_endpoint_url",
                    value("token_endpoint_url")?,
                );
                let client_id = match value("client_id") {
                    Some(v) => self.name_text("upstream.sasl.client_id", v),
                    None => {
                        self.missing_key(SECTION, "client_id", section);
                        None
                    }
                };
                let secret = match (
                    keys.get("client_secret_file"),
                    keys.get("client_secret_env"),
                ) {
                    (Some((_, file)), None) => self
                        .file_path("upstream.sasl.client_secret_file", file)
                        .map(PasswordSource::File),
                    (None, Some((_, env))) => self
                        .env_name_of("upstream.sasl.client_secret_env", env)
                        .map(PasswordSource::Env),
                    (Some(_), Some((second, _))) => {
                        self.sink.report(
                            &second.span(),
                            Some("upstream.sasl.client_secret_env"),
                            None,
                            "set only one of client_secret_file and client_secret_env: which \
                             one would be the secret?",
                            None,
                        );
                        None
                    }
                    (None, None) => {
                        let at = section.span().start;
                        self.sink.report(
                            &(at..at),
                            Some("upstream.sasl.client_secret_file"),
                            None,
                            "missing key in [upstream.sasl]: kpress reads the client secret \
                             from a file (client_secret_file) or an environment variable \
                             (client_secret_env)",
                            None,
                        );
                        None
                    }
                };
                let scope = match value("scope") {
                    Some(v) => self.name_text("upstream.sasl.scope", v).map(Some),
                    None => Some(None),
                };
                Some(BearerTokenSource::ClientCredentials {
                    token_endpoint_url: url?,
                    client_id: client_id?,
                    client_secret: secret?,
                    scope: scope?,
                })
            }
        };
        found.filter(|_| ok)
    }

    /// An `http://` or `https://` URL with a host.
    fn http_url(&mut self, key: &str, value: &Spanned<DeValue<'_>>) -> Option<String> {
        let url = self.string(key, value)?;
        let rest = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://"));
        let host = rest.map(|r| r.split(['/', '?', '#']).next().unwrap_or(""));
        let valid = host.is_some_and(|h| !h.is_empty() && !h.contains('@'))
            && !url.contains(|c: char| c.is_whitespace() || c.is_control());
        if valid {
            Some(url.to_owned())
        } else {
            self.sink.bad_value(
                key,
                &value.span(),
                "not an http(s) URL with a host",
                Some(
                    "http://host[:port]/path or https://host[:port]/path, no user info".to_owned(),
                ),
            );
            None
        }
    }

    /// An AWS region name such as `us-east-1` or `us-gov-west-1`.
    fn aws_region(&mut self, value: &Spanned<DeValue<'_>>) -> Option<String> {
        const KEY: &str = "upstream.sasl.region";
        let region = self.string(KEY, value)?;
        let parts: Vec<&str> = region.split('-').collect();
        let valid = parts.len() >= 3
            && region.len() <= 32
            && parts[..parts.len() - 1]
                .iter()
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase()))
            && parts[parts.len() - 1].bytes().all(|b| b.is_ascii_digit())
            && !parts[parts.len() - 1].is_empty();
        if valid {
            Some(region.to_owned())
        } else {
            self.sink.bad_value(
                KEY,
                &value.span(),
                "not an AWS region name",
                Some("an AWS region such as \"us-east-1\" or \"eu-central-1\"".to_owned()),
            );
            None
        }
    }

    /// `password_env`, `client_secret_env`: a name a shell can export.
    fn env_name_of(&mut self, key: &str, value: &Spanned<DeValue<'_>>) -> Option<String> {
        let name = self.string(key, value)?;
        let mut chars = name.chars();
        let valid = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if valid {
            Some(name.to_owned())
        } else {
            self.sink.bad_value(
                key,
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
