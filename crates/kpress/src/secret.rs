//! Secrets of `[upstream.sasl]` (a password, an OAuth client secret) read from where the
//! policy says they are: a file or an environment variable.

use anyhow::Context;
use kpress_config::PasswordSource;

/// The secret `source` holds, for the key pair `{key}_file` / `{key}_env` of
/// `[upstream.sasl]`; `what` names it in the error when it is empty. A file's one
/// trailing line break goes: `echo` and secret stores end files with one.
pub(crate) fn read_secret(
    source: &PasswordSource,
    key: &str,
    what: &str,
) -> anyhow::Result<String> {
    let secret = match source {
        PasswordSource::File(path) => {
            let text = std::fs::read_to_string(path).with_context(|| {
                format!("upstream.sasl.{key}_file: cannot read {}", path.display())
            })?;
            let text = text.strip_suffix('\n').unwrap_or(&text);
            text.strip_suffix('\r').unwrap_or(text).to_owned()
        }
        PasswordSource::Env(name) => std::env::var(name).map_err(|err| {
            anyhow::anyhow!(
                "upstream.sasl.{key}_env: the environment variable {name} {}",
                match err {
                    std::env::VarError::NotPresent => "is not set",
                    std::env::VarError::NotUnicode(_) => "is not valid UTF-8",
                }
            )
        })?,
    };
    anyhow::ensure!(
        !secret.is_empty(),
        "upstream.sasl: the {what} is empty ({})",
        match source {
            PasswordSource::File(path) => format!("{key}_file {}", path.display()),
            PasswordSource::Env(name) => format!("{key}_env {name}"),
        }
    );
    Ok(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_comes_from_its_file_or_variable_and_must_be_there() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret\r\n").unwrap();
        let source = PasswordSource::File(file.clone());
        assert_eq!(
            read_secret(&source, "password", "password").unwrap(),
            "s3cret"
        );
        std::fs::write(&file, "\n").unwrap();
        let err = read_secret(&source, "client_secret", "client secret").unwrap_err();
        assert!(
            err.to_string()
                .contains("client secret is empty (client_secret_file"),
            "{err}"
        );
        let missing = PasswordSource::File(dir.path().join("absent"));
        let err = read_secret(&missing, "password", "password").unwrap_err();
        assert!(
            err.to_string().contains("password_file: cannot read"),
            "{err}"
        );
        let unset = PasswordSource::Env("KPRESS_TEST_SURELY_UNSET_VARIABLE".into());
        let err = read_secret(&unset, "client_secret", "client secret").unwrap_err();
        assert!(
            err.to_string().contains(
                "client_secret_env: the environment variable KPRESS_TEST_SURELY_UNSET_VARIABLE is not set"
            ),
            "{err}"
        );
    }
}
