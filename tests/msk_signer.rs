//! kpress's MSK IAM tokens, byte for byte against AWS's own SigV4 presigner.
//!
//! tests/go-msk-signer is a small Go program around the AWS SDK for Go v2's
//! `PresignHTTP` that prints the MSK IAM token for fixed credentials, time, region and
//! user agent. It is built offline from the module cache `scripts/setup.sh` fills
//! (`.cache/go`), and its token must equal kpress's for every case. No MSK cluster is
//! reachable from these machines: this comparison is the check that MSK would accept
//! kpress's tokens.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use kpress_auth::sigv4::msk_token;
use kpress_auth::AwsCredentials;
use kpress_tests::paths::{cache_dir, workspace_root};

/// The Go signer, built once per test run.
fn go_signer() -> &'static PathBuf {
    static SIGNER: OnceLock<PathBuf> = OnceLock::new();
    SIGNER.get_or_init(|| {
        let go_dir = cache_dir().join("go");
        let out = tempfile::Builder::new()
            .prefix("go-msk-signer")
            .tempdir()
            .expect("a temporary directory")
            .keep()
            .join("go-msk-signer");
        let built = Command::new("go")
            .args(["build", "-o"])
            .arg(&out)
            .arg(".")
            .current_dir(workspace_root().join("tests/go-msk-signer"))
            .env("GOPATH", &go_dir)
            .env("GOMODCACHE", go_dir.join("mod"))
            .env("GOCACHE", go_dir.join("build"))
            .env("GOFLAGS", "-buildvcs=false -modcacherw")
            // The modules come from the cache scripts/setup.sh filled, never the network.
            .env("GOPROXY", "off")
            .output()
            .expect("go runs (install Go 1.24+, then run scripts/setup.sh)");
        assert!(
            built.status.success(),
            "building tests/go-msk-signer failed (run scripts/setup.sh to cache its modules):\n{}",
            String::from_utf8_lossy(&built.stderr)
        );
        out
    })
}

fn aws_token(region: &str, credentials: &AwsCredentials, unix_seconds: i64, agent: &str) -> String {
    let out = Command::new(go_signer())
        .args([
            region,
            &credentials.access_key_id,
            &credentials.secret_access_key,
            credentials.session_token.as_deref().unwrap_or(""),
            &unix_seconds.to_string(),
            agent,
        ])
        .output()
        .expect("the Go signer runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("a base64url token")
}

#[test]
fn msk_iam_tokens_equal_aws_sigv4_presigner_byte_for_byte() {
    let long_term = AwsCredentials {
        access_key_id: "AKIDEXAMPLE".into(),
        secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
        session_token: None,
    };
    let temporary = AwsCredentials {
        access_key_id: "ASIAQEXAMPLE7TEMPKEY".into(),
        secret_access_key: "Qz9/+ab=cd/EXAMPLEsecretWITHsymbols+/=".into(),
        // Session tokens are long base64 with '+', '/' and '='.
        session_token: Some(
            "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQD+example/token+with==".into(),
        ),
    };
    let cases = [
        ("us-east-1", &long_term, 1_440_938_160, "kpress/0.1.0"),
        ("eu-central-1", &temporary, 1_764_000_000, "kpress/0.1.0"),
        // Midnight of a leap day, a region of another partition.
        (
            "us-gov-west-1",
            &temporary,
            1_709_164_800,
            "kpress/0.1.0-test",
        ),
        ("ap-southeast-2", &long_term, 4_102_444_799, "kpress"),
    ];
    let mut mismatches = Vec::new();
    for (region, credentials, seconds, agent) in cases {
        let at = time::OffsetDateTime::from_unix_timestamp(seconds).expect("a valid time");
        let ours = msk_token(region, credentials, at, agent);
        let theirs = aws_token(region, credentials, seconds, agent);
        if ours != theirs {
            mismatches.push(format!(
                "{region} at {seconds} ({agent}):\n  kpress: {ours}\n  AWS:    {theirs}"
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}
