//! kpress's own login from `[upstream.sasl]`: PLAIN or SCRAM credentials, or the
//! OAUTHBEARER token source the policy names, with its secrets read from where the
//! policy says they are.

use anyhow::Context;
use kpress_auth::{BearerTokens, ClientCredentials, MskIam, TokenSource};
use kpress_config::{BearerTokenSource, Config};
use kpress_proxy::SaslLogin;

use crate::secret::read_secret;

/// The `User-Agent` of kpress's MSK IAM tokens, which MSK logs.
const MSK_USER_AGENT: &str = concat!("kpress/", env!("CARGO_PKG_VERSION"));

/// kpress's own login to the brokers, if the policy gives one; secrets are read now.
pub(crate) fn login(config: &Config) -> anyhow::Result<Option<SaslLogin>> {
    let upstream = &config.upstream;
    if let Some(sasl) = &upstream.sasl {
        return Ok(Some(SaslLogin {
            mechanism: sasl.mechanism,
            username: sasl.username.clone(),
            password: read_secret(&sasl.password, "password", "password")?,
            bearer: None,
        }));
    }
    upstream.oauthbearer.as_ref().map(bearer_login).transpose()
}

/// The login for `source`. Secrets are read now; tokens are fetched at each login.
fn bearer_login(source: &BearerTokenSource) -> anyhow::Result<SaslLogin> {
    let tokens = match source {
        BearerTokenSource::ClientCredentials {
            token_endpoint_url,
            client_id,
            client_secret,
            scope,
        } => TokenSource::ClientCredentials(ClientCredentials {
            token_endpoint_url: token_endpoint_url.clone(),
            client_id: client_id.clone(),
            client_secret: read_secret(client_secret, "client_secret", "client secret")?,
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

#[cfg(test)]
mod tests {
    use super::*;
    use kpress_config::PasswordSource;

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
