//! A host without QATzip: `QATZIP_LIB_DIR` names an empty directory. Alone in its own
//! test binary (own process) because the library is searched once per process.

use kpress_deflate::{ProviderChoice, ProviderError, ProviderKind, Registry};

#[test]
fn without_qatzip_qat_is_unavailable_and_named_use_is_an_error_not_a_fallback() {
    let empty = std::env::temp_dir().join(format!("kpress-qat-missing-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    std::env::set_var("QATZIP_LIB_DIR", &empty);

    let registry = Registry::detect();
    let status = registry
        .statuses()
        .into_iter()
        .find(|s| s.provider == ProviderKind::Qat)
        .unwrap();
    assert!(!status.available && !status.hardware);
    assert!(
        status.detail.contains("libqatzip.so.3 not found")
            && status.detail.contains(&*empty.to_string_lossy()),
        "{}",
        status.detail
    );

    let err = registry
        .resolve(ProviderChoice::Named(ProviderKind::Qat))
        .unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::Unavailable {
                provider: ProviderKind::Qat,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .starts_with("gzip provider qat is not available"),
        "{err}"
    );
    // The built-in providers, and auto, still work (ISA-L is optional too:
    // isal_missing.rs).
    assert_eq!(
        registry.resolve(ProviderChoice::Auto).unwrap().kind(),
        ProviderKind::Libdeflate
    );
    for kind in [ProviderKind::Libdeflate, ProviderKind::Zlib] {
        let p = registry.resolve(ProviderChoice::Named(kind)).unwrap();
        let mut gz = Vec::new();
        p.compress(b"still works", 6, &mut gz).unwrap();
    }
    std::fs::remove_dir(&empty).unwrap();
}
