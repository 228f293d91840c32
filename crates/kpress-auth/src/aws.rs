//! MSK IAM tokens from the standard AWS credential environment.

use std::time::SystemTime;

use time::OffsetDateTime;

use crate::sigv4::{self, AwsCredentials};
use crate::{after, AuthError, BearerToken};

/// An MSK IAM token maker for one region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MskIam {
    pub region: String,
    /// The `User-Agent` query parameter of the token, which MSK logs.
    pub user_agent: String,
}

impl MskIam {
    /// A token signed now with the environment's credentials (read at each new token,
    /// so a rotated environment is picked up by the next one).
    pub(crate) fn token(&self, now: SystemTime) -> Result<BearerToken, AuthError> {
        let credentials = credentials_from_env(|name| std::env::var(name).ok())?;
        let at = OffsetDateTime::from(now);
        let token = sigv4::msk_token(&self.region, &credentials, at, &self.user_agent);
        BearerToken::new(
            token,
            now,
            after(now, sigv4::MSK_TOKEN_EXPIRES_SECONDS.into()),
        )
    }
}

/// Credentials from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and, for temporary
/// ones, `AWS_SESSION_TOKEN`. A web-identity environment (`AWS_WEB_IDENTITY_TOKEN_FILE`
/// with `AWS_ROLE_ARN`, as on EKS) needs an STS call kpress does not make: it is
/// refused by name rather than ignored.
pub fn credentials_from_env(
    var: impl Fn(&str) -> Option<String>,
) -> Result<AwsCredentials, AuthError> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty());
    match (set("AWS_ACCESS_KEY_ID"), set("AWS_SECRET_ACCESS_KEY")) {
        (Some(access_key_id), Some(secret_access_key)) => Ok(AwsCredentials {
            access_key_id,
            secret_access_key,
            session_token: set("AWS_SESSION_TOKEN"),
        }),
        (Some(_), None) => Err(AuthError::AwsCredentials(
            "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not".into(),
        )),
        (None, Some(_)) => Err(AuthError::AwsCredentials(
            "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not".into(),
        )),
        (None, None) if set("AWS_WEB_IDENTITY_TOKEN_FILE").is_some() => {
            Err(AuthError::AwsCredentials(
                "AWS_WEB_IDENTITY_TOKEN_FILE is set, but kpress does not exchange a web \
                 identity token with STS (AssumeRoleWithWebIdentity); give it \
                 AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN instead"
                    .into(),
            ))
        }
        (None, None) => Err(AuthError::AwsCredentials(
            "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for \
             temporary credentials) in kpress's environment"
                .into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn credentials_come_from_the_standard_variables() {
        let creds = credentials_from_env(env(&[
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_SESSION_TOKEN", "session"),
        ]))
        .unwrap();
        assert_eq!(creds.session_token.as_deref(), Some("session"));
        let creds = credentials_from_env(env(&[
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_SESSION_TOKEN", ""),
        ]))
        .unwrap();
        assert_eq!(creds.session_token, None);
    }

    #[test]
    fn missing_and_unsupported_sources_are_named() {
        for (vars, says) in [
            (&[][..], "set AWS_ACCESS_KEY_ID"),
            (
                &[("AWS_ACCESS_KEY_ID", "A")][..],
                "AWS_SECRET_ACCESS_KEY is not",
            ),
            (
                &[
                    ("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/token"),
                    ("AWS_ROLE_ARN", "arn"),
                ][..],
                "AssumeRoleWithWebIdentity",
            ),
        ] {
            let err = credentials_from_env(env(vars)).unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
        }
    }
}
