//! A host without QATzip (`QATZIP_LIB_DIR` names an empty directory): naming `qat` is
//! an error when the option is set, never a silent fallback; `auto` still works. Alone
//! in its own test binary (own process) because QATzip is searched once per process.

use kpress_codec::options::GZIP_PROVIDER;
use kpress_codec::{Codec, CompressionOptions, Compressor, OptionError};

#[test]
fn naming_a_missing_provider_is_a_configuration_error() {
    let empty = std::env::temp_dir().join(format!("kpress-codec-no-qatzip-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    std::env::set_var("QATZIP_LIB_DIR", &empty);

    let mut options = CompressionOptions::default();
    let err = options.set(GZIP_PROVIDER, "qat").unwrap_err();
    assert!(matches!(err, OptionError::Unavailable { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.starts_with("compression.gzip.provider = \"qat\" cannot be used on this host")
            && msg.contains("libqatzip.so.3 not found"),
        "{msg}"
    );
    // The options are unchanged: gzip is still zlib, and `auto` picks software.
    assert_eq!(options.get_text(GZIP_PROVIDER).as_deref(), Some("zlib"));
    options.set(GZIP_PROVIDER, "auto").unwrap();
    let mut out = Vec::new();
    Compressor::new(Codec::Gzip, &options)
        .compress(b"still compresses", &mut out)
        .unwrap();
    std::fs::remove_dir(&empty).unwrap();
}
