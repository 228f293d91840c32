//! kpress's own OAUTHBEARER login from `[upstream.sasl]`: the token source the policy
//! names, with its secrets read from where the policy says they are.

use anyhow::Context;
use kpress_auth::{BearerTokens, ClientCredentials, MskIam, TokenSource};
use kpress_config::{BearerTokenSource, PasswordSource};
use kpress_proxy::SaslLogin;

/// The `User-Agent` of kpress's MSK IAM tokens, which MSK logs.
const MSK_USER_AGENT: &str = concat!("kpress/", env!("CARGO_PKG_VERSION"));

/// The login for `source`. Secrets are read now; tokens are fetched at each login.
pub(crate) fn bearer_login(source: &BearerTokenSource) -> anyhow::Result<SaslLogin> {
    let tokens = match source {
        BearerTokenSource::ClientCredentials {
            token_endpoint_url,
            client_id,
            client_secret,
            scope,
        } => TokenSource::ClientCredentials(ClientCredentials {
            token_endpoint_url: token_endpoint_url.clone(),
            client_id: client_id.clone(),
            client_secret: read_secret(client_secret)?,
            scope: scope.clone(),
        }),
        BearerTokenSource::TokenFile(path) => TokenSource::File(path.clone()),
        BearerTokenSource::AwsMskIam { region } => {
            // Refused now rather than at the first lookup: a missing credential is a
            // deployment mistake, not a passing fault.
            kpress_auth::credential_source_from_env(|name| std::env::var(name).ok())
                .context("upstream.sasl.token_provider = \"aws_msk_iam\"")?;
            TokenSource::AwsMskIam(MskIam {
                region: region.clone(),
                user_agent: MSK_USER_AGENT.to_owned(),
            })
        }
    };
    let tokens = BearerTokens::new(tokens).context("upstream.sasl (OAUTHBEARER)")?;
    Ok(SaslLogin::bearer(tokens))
}

/// The client secret from `client_secret_file` (less one trailing line break) or
/// `client_secret_env`.
fn read_secret(source: &PasswordSource) -> anyhow::Result<String> {
    let secret = match source {
        PasswordSource::File(path) => {
            let text = std::fs::read_to_string(path).with_context(|| {
                format!(
                    "upstream.sasl.client_secret_file: cannot read {}",
                    path.display()
                )
            })?;
            let text = text.strip_suffix('\n').unwrap_or(&text);
            text.strip_suffix('\r').unwrap_or(text).to_owned()
        }
        PasswordSource::Env(name) => std::env::var(name).map_err(|err| {
            anyhow::anyhow!(
                "upstream.sasl.client_secret_env: the environment variable {name} {}",
                match err {
                    std::env::VarError::NotPresent => "is not set",
                    std::env::VarError::NotUnicode(_) => "is not valid UTF-8",
                }
            )
        })?,
    };
    anyhow::ensure!(
        !secret.is_empty(),
        "upstream.sasl: the client secret is empty"
    );
    Ok(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_secrets_are_read_and_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret");
        std::fs::write(&file, "hunter2\n").unwrap();
        let login = bearer_login(&BearerTokenSource::ClientCredentials {
            token_endpoint_url: "https://idp.example.com/token".into(),
            client_id: "kpress".into(),
            client_secret: PasswordSource::File(file.clone()),
            scope: None,
        })
        .unwrap();
        let shown = format!("{login:?}");
        assert!(
            shown.contains("OAuthBearer") && !shown.contains("hunter2"),
            "{shown}"
        );
        std::fs::write(&file, "").unwrap();
        let err = bearer_login(&BearerTokenSource::ClientCredentials {
            token_endpoint_url: "https://idp.example.com/token".into(),
            client_id: "kpress".into(),
            client_secret: PasswordSource::File(file),
            scope: None,
        })
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("client secret is empty"),
            "{err:#}"
        );
    }
}
