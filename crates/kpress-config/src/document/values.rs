//! The value readers every section shares: each checks one value's type and form and
//! reports a problem at it, naming the key, when it is wrong.

use std::net::SocketAddr;
use std::path::PathBuf;

use kpress_codec::options::allowed_values;
use kpress_codec::CompressionOptions;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::Walk;

impl Walk<'_> {
    pub(super) fn string<'a>(
        &mut self,
        key: &str,
        value: &'a Spanned<DeValue<'_>>,
    ) -> Option<&'a str> {
        match value.get_ref() {
            DeValue::String(s) => Some(s.as_ref()),
            other => {
                self.sink.bad_value(
                    key,
                    &value.span(),
                    format!("must be a string, not {}", other.type_str()),
                    None,
                );
                None
            }
        }
    }

    pub(super) fn boolean(&mut self, key: &str, value: &Spanned<DeValue<'_>>) -> Option<bool> {
        match value.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            other => {
                self.sink.bad_value(
                    key,
                    &value.span(),
                    format!("must be true or false, not {}", other.type_str()),
                    Some("true, false".to_owned()),
                );
                None
            }
        }
    }

    pub(super) fn integer(
        &mut self,
        key: &str,
        value: &Spanned<DeValue<'_>>,
        allowed: Option<String>,
    ) -> Option<i64> {
        match value.get_ref() {
            DeValue::Integer(n) => match i64::from_str_radix(n.as_str(), n.radix()) {
                Ok(n) => Some(n),
                Err(_) => {
                    self.sink
                        .bad_value(key, &value.span(), "out of range", allowed);
                    None
                }
            },
            other => {
                self.sink.bad_value(
                    key,
                    &value.span(),
                    format!("must be an integer, not {}", other.type_str()),
                    allowed,
                );
                None
            }
        }
    }

    /// The integer codec option `option` (`compression.zstd.level`, ...), written as
    /// `key`, set in `options`; a value out of the codec's range names the range.
    pub(super) fn codec_level(
        &mut self,
        key: &str,
        option: &str,
        value: &Spanned<DeValue<'_>>,
        options: &mut CompressionOptions,
    ) -> Option<()> {
        let allowed = allowed_values(option).map(|a| a.to_string());
        let n = self.integer(key, value, allowed.clone())?;
        if options.set_int(option, n).is_ok() {
            return Some(());
        }
        self.sink
            .bad_value(key, &value.span(), "out of range", allowed);
        None
    }

    pub(super) fn integer_in(
        &mut self,
        key: &str,
        value: &Spanned<DeValue<'_>>,
        min: i64,
        max: i64,
        allowed: &str,
    ) -> Option<i64> {
        let n = self.integer(key, value, Some(allowed.to_owned()))?;
        if (min..=max).contains(&n) {
            Some(n)
        } else {
            self.sink
                .bad_value(key, &value.span(), "out of range", Some(allowed.to_owned()));
            None
        }
    }

    pub(super) fn socket_addr(
        &mut self,
        key: &str,
        value: &Spanned<DeValue<'_>>,
    ) -> Option<SocketAddr> {
        let text = self.string(key, value)?;
        match text.parse::<SocketAddr>() {
            Ok(addr) => Some(addr),
            Err(_) => {
                self.sink.bad_value(
                    key,
                    &value.span(),
                    "not an IP:port socket address",
                    Some("IPv4:port or [IPv6]:port, e.g. 127.0.0.1:19092".to_owned()),
                );
                None
            }
        }
    }

    /// A table nested in a section (`[listener.tls]`), named in full in problems.
    pub(super) fn subtable<'a, 'i>(
        &mut self,
        key: &str,
        value: &'a Spanned<DeValue<'i>>,
    ) -> Option<&'a DeTable<'i>> {
        match value.get_ref() {
            DeValue::Table(t) => Some(t),
            other => {
                self.sink.bad_value(
                    key,
                    &value.span(),
                    format!("must be a table, not {}", other.type_str()),
                    None,
                );
                None
            }
        }
    }

    /// One of the names in `choices`, spelt exactly; `what` names the kind of thing.
    pub(super) fn choice<T: Copy>(
        &mut self,
        key: &str,
        value: &Spanned<DeValue<'_>>,
        what: &str,
        choices: &[(&str, T)],
    ) -> Option<T> {
        let allowed = || {
            choices
                .iter()
                .map(|(name, _)| format!("\"{name}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let DeValue::String(text) = value.get_ref() else {
            self.sink.bad_value(
                key,
                &value.span(),
                format!("must be a string, not {}", value.get_ref().type_str()),
                Some(allowed()),
            );
            return None;
        };
        let text: &str = text.as_ref();
        if let Some((_, chosen)) = choices.iter().find(|(name, _)| *name == text) {
            return Some(*chosen);
        }
        let message = match choices
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(text))
        {
            Some((name, _)) => {
                format!("unknown {what}: names are case-sensitive, write \"{name}\"")
            }
            None => format!("unknown {what}"),
        };
        self.sink
            .bad_value(key, &value.span(), message, Some(allowed()));
        None
    }

    /// A non-empty string without control characters, such as a name.
    pub(super) fn name_text(&mut self, key: &str, value: &Spanned<DeValue<'_>>) -> Option<String> {
        let text = self.string(key, value)?;
        if text.is_empty() || text.contains(char::is_control) {
            self.sink.bad_value(
                key,
                &value.span(),
                "must not be empty or hold control characters",
                None,
            );
            return None;
        }
        Some(text.to_owned())
    }

    /// A file the policy names (a certificate, a key, a password). As written by
    /// `parse`; under `load`, resolved against the policy file's directory when
    /// relative, and checked to be a readable file.
    pub(super) fn file_path(&mut self, key: &str, value: &Spanned<DeValue<'_>>) -> Option<PathBuf> {
        let written = PathBuf::from(self.name_text(key, value)?);
        let Some(base_dir) = self.base_dir else {
            return Some(written);
        };
        let path = base_dir.join(&written);
        let shown = path.display();
        let problem = match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Some(format!("file not found: {shown}"))
            }
            Err(e) => Some(format!("cannot read {shown}: {e}")),
            Ok(meta) if meta.is_dir() => Some(format!("{shown} is a directory, not a file")),
            // Opening a FIFO or a device could block or read without end.
            Ok(meta) if !meta.is_file() => Some(format!("{shown} is not a regular file")),
            Ok(_) => std::fs::File::open(&path)
                .err()
                .map(|e| format!("cannot read {shown}: {e}")),
        };
        match problem {
            Some(message) => {
                self.sink.bad_value(key, &value.span(), message, None);
                None
            }
            None => Some(path),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{config, one_problem, HEAD};

    fn listener(line: &str) -> String {
        format!("[listener]\nbind = \"127.0.0.1:19092\"\n{line}\n[upstream]\nbootstrap_servers = [\"127.0.0.1:9092\"]\n")
    }

    #[test]
    fn boolean_names_the_type_found() {
        assert_eq!(
            one_problem(&listener("reuse_port = \"yes\"")),
            "t.toml:3:14: listener.reuse_port = \"yes\": must be true or false, not string \
             (allowed: true, false)"
        );
        assert!(config(&listener("reuse_port = true")).listener.reuse_port);
    }

    #[test]
    fn integers_are_read_in_any_radix_and_checked_against_the_range() {
        let c = config(&format!("{HEAD}[limits]\nmax_connections = 0x10\n"));
        assert_eq!(c.limits.max_connections, 16);
        assert_eq!(
            one_problem(&format!("{HEAD}[limits]\nmax_connections = 1.5\n")),
            "t.toml:6:19: limits.max_connections = 1.5: must be an integer, not float \
             (allowed: 1..1000000)"
        );
    }

    #[test]
    fn socket_addresses_are_ip_and_port() {
        assert_eq!(
            one_problem(
                "[listener]\nbind = \"127.0.0.1\"\n[upstream]\nbootstrap_servers = [\"h:1\"]\n"
            ),
            "t.toml:2:8: listener.bind = \"127.0.0.1\": not an IP:port socket address \
             (allowed: IPv4:port or [IPv6]:port, e.g. 127.0.0.1:19092)"
        );
        assert_eq!(
            config(
                "[listener]\nbind = \"[::1]:19092\"\n[upstream]\nbootstrap_servers = [\"h:1\"]\n"
            )
            .listener
            .bind
            .to_string(),
            "[::1]:19092"
        );
    }

    #[test]
    fn a_choice_is_spelt_exactly() {
        assert_eq!(
            one_problem(&listener("mode = \"SNI\"")),
            "t.toml:3:8: listener.mode = \"SNI\": unknown listener mode: names are \
             case-sensitive, write \"sni\" (allowed: \"ports\", \"sni\")"
        );
        assert_eq!(
            one_problem(&listener("mode = \"dns\"")),
            "t.toml:3:8: listener.mode = \"dns\": unknown listener mode \
             (allowed: \"ports\", \"sni\")"
        );
    }

    #[test]
    fn a_subtable_must_be_a_table() {
        assert_eq!(
            one_problem(&listener("tls = \"on\"")),
            "t.toml:3:7: listener.tls = \"on\": must be a table, not string"
        );
    }

    #[test]
    fn a_name_is_not_empty_and_has_no_control_characters() {
        let sasl = |username: &str| {
            format!(
                "{HEAD}[upstream.sasl]\nmechanism = \"PLAIN\"\nusername = {username}\n\
                 password_env = \"P\"\n"
            )
        };
        for bad in ["\"\"", "\"a\\tb\""] {
            assert_eq!(
                one_problem(&sasl(bad)),
                format!(
                    "t.toml:7:12: upstream.sasl.username = {bad}: must not be empty or hold \
                     control characters"
                )
            );
        }
    }

    #[test]
    fn parse_keeps_named_files_as_written() {
        let c = config(&format!("{HEAD}[upstream.tls]\nca = \"certs/ca.pem\"\n"));
        let ca = c.upstream.tls.unwrap().ca.unwrap();
        assert_eq!(ca, std::path::Path::new("certs/ca.pem"));
    }
}
