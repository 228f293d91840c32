//! Generates the ISA-L igzip bindings with bindgen from the real `isa-l/igzip_lib.h`
//! when the header is there (under `ISAL_INCLUDE_DIR`, else `/usr/include`, where
//! Debian's libisal-dev puts it), and otherwise uses `src/bindings.rs`, the same
//! generator's output committed with the crate. Either way nothing is linked: the
//! library is opened at run time (see `src/loader.rs`), so a build never needs ISA-L.
//!
//! `ISAL_SYS_UPDATE_BINDINGS=1` also writes the generated file over `src/bindings.rs`;
//! the crate's tests check that the committed file equals a fresh generation.

use std::path::{Path, PathBuf};

/// The functions kpress calls; only these are looked up when the library is opened.
const FUNCTIONS: &[&str] = &[
    "isal_deflate_stateless_init",
    "isal_deflate_stateless",
    "isal_inflate_init",
    "isal_inflate",
];

/// The structs those functions take (their layouts come along with them).
const TYPES: &[&str] = &["isal_zstream", "inflate_state", "isal_block_state"];

/// The constants of igzip's API: levels and their buffer sizes, flush and wrapper
/// modes, return codes.
const VARS: &[&str] = &[
    "ISAL_.*",
    "IGZIP_.*",
    "COMP_OK",
    "STATELESS_OVERFLOW",
    "INVALID_FLUSH",
    "INVALID_PARAM",
    "NO_FLUSH",
    "SYNC_FLUSH",
    "FULL_FLUSH",
];

fn main() {
    let manifest_dir =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
    let committed = manifest_dir.join("src/bindings.rs");
    println!("cargo:rerun-if-env-changed=ISAL_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed=ISAL_SYS_UPDATE_BINDINGS");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/bindings.rs");
    println!("cargo::rustc-check-cfg=cfg(isal_sys_regenerated)");

    let out = out_dir.join("bindings.rs");
    let header = find_header();
    // Watched only when present: cargo reruns a build script on every build while a
    // path it watches is missing. Installing libisal-dev later changes nothing until
    // this crate is rebuilt, and the committed bindings are that same generation.
    if header.is_file() {
        println!("cargo:rerun-if-changed={}", header.display());
        match generate(&header) {
            Ok(text) => {
                std::fs::write(&out, &text).expect("write OUT_DIR/bindings.rs");
                println!("cargo:rustc-cfg=isal_sys_regenerated");
                if std::env::var_os("ISAL_SYS_UPDATE_BINDINGS").is_some_and(|v| v == "1") {
                    std::fs::write(&committed, &text).expect("write src/bindings.rs");
                }
                return;
            }
            // A machine without libclang builds from the committed file, said once.
            Err(why) => println!(
                "cargo:warning=isal-sys: bindgen could not process {} ({why}); using the committed src/bindings.rs",
                header.display()
            ),
        }
    }
    // No header (libisal-dev not installed) is the ordinary case: no warning.
    std::fs::copy(&committed, &out).expect("copy src/bindings.rs to OUT_DIR");
}

/// `ISAL_INCLUDE_DIR/isa-l/igzip_lib.h` when the variable is set (and only there:
/// pointing it at an empty directory builds from the committed bindings), else the
/// system's `/usr/include/isa-l/igzip_lib.h`.
fn find_header() -> PathBuf {
    let dir = std::env::var_os("ISAL_INCLUDE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/include"));
    dir.join("isa-l/igzip_lib.h")
}

fn generate(header: &Path) -> Result<String, String> {
    let mut builder = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .dynamic_library_name("IsalLibrary")
        .dynamic_link_require_all(true)
        .derive_default(true)
        .layout_tests(true)
        .generate_comments(false)
        .merge_extern_blocks(true)
        .wrap_unsafe_ops(true)
        .formatter(bindgen::Formatter::Prettyplease);
    for f in FUNCTIONS {
        builder = builder.allowlist_function(f);
    }
    for t in TYPES {
        builder = builder.allowlist_type(t);
    }
    for v in VARS {
        builder = builder.allowlist_var(v);
    }
    // bindgen panics when libclang cannot be loaded; that machine falls back to the
    // committed bindings instead of failing the build.
    let generated =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || builder.generate()))
            .map_err(|_| "libclang could not be loaded".to_owned())?
            .map_err(|e| e.to_string())?;
    Ok(generated.to_string())
}
