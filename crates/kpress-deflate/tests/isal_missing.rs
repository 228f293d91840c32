//! A host without ISA-L: `ISAL_LIB_DIR` names an empty directory. The `isal` provider
//! is unavailable with the loader's reason, naming it is an error (not a quiet
//! substitute), a direct call fails with that reason and falls back to zlib, counted,
//! and every other provider and `auto` work. Alone in its own test binary (own
//! process) because the library is searched once per process.

use kpress_deflate::{
    compress_fallbacks, compress_with_fallback, DeflateError, GzipProvider, IsalProvider,
    ProviderChoice, ProviderError, ProviderKind, Registry,
};

#[test]
fn without_isal_the_provider_is_unavailable_and_named_use_is_an_error() {
    let empty = std::env::temp_dir().join(format!("kpress-isal-missing-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    std::env::set_var("ISAL_LIB_DIR", &empty);

    let registry = Registry::detect();
    for status in [registry.statuses(), registry.statuses_without_probing()] {
        let isal = status
            .into_iter()
            .find(|s| s.provider == ProviderKind::Isal)
            .unwrap();
        assert!(!isal.available && !isal.hardware);
        assert!(
            isal.detail.contains("libisal.so.2 not found")
                && isal.detail.contains(&*empty.to_string_lossy()),
            "{}",
            isal.detail
        );
    }

    let err = registry
        .resolve(ProviderChoice::Named(ProviderKind::Isal))
        .unwrap_err();
    assert!(
        matches!(
            &err,
            ProviderError::Unavailable {
                provider: ProviderKind::Isal,
                reason,
            } if reason.contains("libisal.so.2 not found")
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .starts_with("gzip provider isal is not available: "),
        "{err}"
    );
    assert!(IsalProvider::open().is_err());

    // Used directly anyway: the call says why, and the batch is kept through zlib.
    let input = b"kept through zlib ".repeat(100);
    let mut out = Vec::new();
    let err = IsalProvider.compress(&input, 6, &mut out).unwrap_err();
    assert!(
        matches!(&err, DeflateError::Provider { provider: ProviderKind::Isal, reason }
            if reason.contains("libisal.so.2 not found")),
        "{err}"
    );
    assert!(out.is_empty());
    let before = compress_fallbacks(ProviderKind::Isal);
    let used = compress_with_fallback(&IsalProvider, &input, 6, &mut out).unwrap();
    assert_eq!(used, ProviderKind::Zlib);
    assert_eq!(compress_fallbacks(ProviderKind::Isal), before + 1);

    // The built-in providers, and auto, still work.
    for choice in [
        ProviderChoice::Auto,
        ProviderChoice::Default,
        ProviderChoice::Named(ProviderKind::Libdeflate),
        ProviderChoice::Named(ProviderKind::Zlib),
    ] {
        let p = registry.resolve(choice).unwrap();
        let mut gz = Vec::new();
        p.compress(b"still works", 6, &mut gz).unwrap();
        let mut back = Vec::new();
        p.decompress(&gz, 100, &mut back).unwrap();
        assert_eq!(back, b"still works");
    }
    std::fs::remove_dir(&empty).unwrap();
}
