//! A token file another program keeps fresh (a Kubernetes projected service-account
//! token, a sidecar's output): re-read whenever its modification time, size or inode
//! changes, which an atomic rename or symlink swap also changes.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::SystemTime;

use crate::{jwt, AuthError, BearerToken};

/// Largest token file read.
const MAX_TOKEN_FILE_BYTES: u64 = 64 * 1024;

/// What the file looked like when it was last read.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Seen(Option<(Option<SystemTime>, u64, u64)>);

/// The token in `path` when the file changed since `seen` (or was never read), with
/// the new `Seen`; `None` when unchanged.
pub(crate) async fn read_if_changed(
    path: &Path,
    seen: &Seen,
    now: SystemTime,
) -> Result<(Option<BearerToken>, Seen), AuthError> {
    let failed = |problem: String| AuthError::TokenFile {
        path: path.to_owned(),
        problem,
    };
    let meta = tokio::fs::metadata(path)
        .await
        .map_err(|err| failed(format!("cannot read: {err}")))?;
    let now_seen = Seen(Some((meta.modified().ok(), meta.len(), meta.ino())));
    if seen.0.is_some() && *seen == now_seen {
        return Ok((None, now_seen));
    }
    if meta.len() > MAX_TOKEN_FILE_BYTES {
        return Err(failed(format!("larger than {MAX_TOKEN_FILE_BYTES} bytes")));
    }
    let text = tokio::fs::read_to_string(path)
        .await
        .map_err(|err| failed(format!("cannot read: {err}")))?;
    let value = text.trim();
    let token = BearerToken::new(value.to_owned(), now, jwt::expiry(value))
        .map_err(|err| failed(err.to_string()))?;
    Ok((Some(token), now_seen))
}

#[cfg(test)]
mod tests {
    use crate::{BearerTokens, TokenSource};

    #[tokio::test]
    async fn the_file_is_reread_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "first-token\n").unwrap();
        let tokens = BearerTokens::new(TokenSource::File(path.clone())).unwrap();
        assert_eq!(tokens.token().await.unwrap().secret(), "first-token");
        // Replaced the way kubelet does it: a new file renamed over the old.
        let next = dir.path().join("token.new");
        std::fs::write(&next, "second-token-longer").unwrap();
        std::fs::rename(&next, &path).unwrap();
        assert_eq!(
            tokens.token().await.unwrap().secret(),
            "second-token-longer"
        );
        assert_eq!(
            tokens.token().await.unwrap().secret(),
            "second-token-longer"
        );
    }

    #[tokio::test]
    async fn missing_empty_and_huge_files_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        let tokens = BearerTokens::new(TokenSource::File(path.clone())).unwrap();
        let err = tokens.token().await.unwrap_err().to_string();
        assert!(
            err.contains("token file") && err.contains("cannot read"),
            "{err}"
        );
        std::fs::write(&path, "\n").unwrap();
        let err = tokens.token().await.unwrap_err().to_string();
        assert!(err.contains("is empty"), "{err}");
        std::fs::write(&path, vec![b'a'; 70 * 1024]).unwrap();
        let err = tokens.token().await.unwrap_err().to_string();
        assert!(err.contains("larger than"), "{err}");
    }
}
