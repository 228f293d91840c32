//! A bad gzip payload costs QATzip no session. A payload QATzip finds corrupt, one cut
//! short, or one over the caller's limit leaves its session mid-stream; the session is
//! reset and kept, so no number of them uses up the process's allowance of session
//! starts ([`MAX_SESSION_STARTS_WITHOUT_HARDWARE`]) and QAT keeps decoding. Alone in
//! its own test binary because that allowance is per process.

use kpress_deflate::{
    decompress_fallbacks, decompress_with_fallback, DeflateError, GzipProvider, ProviderKind,
    QatProvider, Registry, ZlibProvider, MAX_SESSION_STARTS_WITHOUT_HARDWARE,
};

fn dataset(name: &str) -> Vec<u8> {
    let dir = kpress_tests::paths::datasets_dir();
    std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name} in {}: {e}", dir.display()))
}

#[test]
fn bad_payloads_keep_their_qatzip_session() {
    let qat = Registry::global()
        .get(ProviderKind::Qat)
        .expect("QATzip from .cache/qatzip (scripts/setup.sh)");
    let input = dataset("apache_access.log")[..200_000].to_vec();
    let mut good = Vec::new();
    qat.compress(&input, 6, &mut good).unwrap();
    let limit = input.len();

    // A deflate block of the reserved type 3: QATzip's inflate says QZ_DATA_ERROR.
    let mut data_error = Vec::new();
    ZlibProvider.compress(b"x", 6, &mut data_error).unwrap();
    data_error[10] = 0x07;
    // The stream cut in half, its trailer kept: QATzip waits for input that never comes.
    let half = good.len() / 2;
    let truncated = [&good[..half], &good[good.len() - 8..]].concat();
    // More than the limit allows: stopped mid-stream.
    let doubled: Vec<u8> = input.iter().chain(&input).copied().collect();
    let mut over_limit = Vec::new();
    qat.compress(&doubled, 6, &mut over_limit).unwrap();
    let bad: [&[u8]; 3] = [&data_error, &truncated, &over_limit];

    let fallbacks = decompress_fallbacks(ProviderKind::Qat);
    let starts = QatProvider::session_starts();
    let rounds = MAX_SESSION_STARTS_WITHOUT_HARDWARE as usize + 50;
    for round in 0..rounds {
        let payload = bad[round % bad.len()];
        let mut out = b"keep".to_vec();
        let err = qat.decompress(payload, limit, &mut out).unwrap_err();
        if payload == over_limit {
            assert_eq!(err, DeflateError::LimitExceeded { limit }, "round {round}");
        } else {
            assert!(
                matches!(err, DeflateError::Corrupt { .. }),
                "round {round}: {err}"
            );
        }
        assert_eq!(out, b"keep", "round {round}");
    }

    // QAT itself, not the zlib fallback, still decodes a good payload.
    let mut out = Vec::new();
    assert_eq!(
        decompress_with_fallback(&*qat, &good, limit, &mut out),
        Ok(input.len())
    );
    assert!(out == input);
    assert_eq!(decompress_fallbacks(ProviderKind::Qat), fallbacks);
    assert!(
        QatProvider::session_starts() - starts <= 1,
        "{} sessions started for {rounds} bad payloads",
        QatProvider::session_starts() - starts
    );
}
