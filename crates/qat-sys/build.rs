//! Generates the QATzip bindings with bindgen from the real `qatzip.h` when the header is
//! there (`QATZIP_INCLUDE_DIR`, else the project cache `.cache/qatzip/root/usr/include`
//! that `scripts/setup.sh qatzip` fills), and otherwise uses `src/bindings.rs`, the same
//! generator's output committed with the crate. Either way nothing is linked: the
//! library is opened at run time (see `src/loader.rs`), so a build never needs QATzip.
//!
//! `QAT_SYS_UPDATE_BINDINGS=1` also writes the generated file over `src/bindings.rs`;
//! the crate's tests check that the committed file equals a fresh generation.

use std::path::{Path, PathBuf};

/// The functions kpress calls; only these are looked up when the library is opened, so
/// an older or newer libqatzip that has them all loads.
const FUNCTIONS: &[&str] = &[
    "qzInit",
    "qzGetDefaultsDeflateExt",
    "qzSetupSessionDeflateExt",
    "qzCompress",
    "qzDecompress",
    "qzGetDeflateEndOfStream",
    "qzTeardownSession",
    "qzClose",
    "qzGetStatus",
    "qzMaxCompressedLength",
];

fn main() {
    let manifest_dir =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
    let committed = manifest_dir.join("src/bindings.rs");
    println!("cargo:rerun-if-env-changed=QATZIP_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed=QAT_SYS_UPDATE_BINDINGS");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/bindings.rs");
    println!("cargo::rustc-check-cfg=cfg(qat_sys_regenerated)");

    let out = out_dir.join("bindings.rs");
    match find_header(&manifest_dir) {
        Some(header) => {
            println!("cargo:rerun-if-changed={}", header.display());
            match generate(&header) {
                Ok(text) => {
                    std::fs::write(&out, &text).expect("write OUT_DIR/bindings.rs");
                    println!("cargo:rustc-cfg=qat_sys_regenerated");
                    if std::env::var_os("QAT_SYS_UPDATE_BINDINGS").is_some_and(|v| v == "1") {
                        std::fs::write(&committed, &text).expect("write src/bindings.rs");
                    }
                    return;
                }
                Err(why) => println!(
                    "cargo:warning=qat-sys: bindgen could not process {} ({why}); using the committed src/bindings.rs",
                    header.display()
                ),
            }
        }
        None => println!(
            "cargo:warning=qat-sys: qatzip.h not found (set QATZIP_INCLUDE_DIR or run scripts/setup.sh); using the committed src/bindings.rs"
        ),
    }
    std::fs::copy(&committed, &out).expect("copy src/bindings.rs to OUT_DIR");
}

/// `QATZIP_INCLUDE_DIR` when set (and only there: pointing it at an empty directory
/// builds from the committed bindings), else the project cache.
fn find_header(manifest_dir: &Path) -> Option<PathBuf> {
    let dir = match std::env::var_os("QATZIP_INCLUDE_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => manifest_dir.join("../../.cache/qatzip/root/usr/include"),
    };
    Some(dir.join("qatzip.h")).filter(|h| h.is_file())
}

fn generate(header: &Path) -> Result<String, String> {
    let mut builder = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .dynamic_library_name("QatzipLibrary")
        .dynamic_link_require_all(true)
        .allowlist_var("QZ_.*")
        .allowlist_type("Qz.*")
        .derive_default(true)
        .layout_tests(true)
        .generate_comments(false)
        .merge_extern_blocks(true)
        .wrap_unsafe_ops(true)
        .formatter(bindgen::Formatter::Prettyplease);
    for f in FUNCTIONS {
        builder = builder.allowlist_function(f);
    }
    // bindgen panics when libclang cannot be loaded; that machine falls back to the
    // committed bindings instead of failing the build.
    let generated =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || builder.generate()))
            .map_err(|_| "libclang could not be loaded".to_owned())?
            .map_err(|e| e.to_string())?;
    Ok(generated.to_string())
}
