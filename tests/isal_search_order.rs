//! Where `libisal.so.2` is looked for and what is said when it is not usable: the
//! system loader's copy opens and is the file mapped; `ISAL_LIB_DIR` is the only place
//! searched when set; a directory without the library, an empty file and a library
//! without igzip's functions are each refused with the reason. `load` caches its answer
//! per process, so the `ISAL_LIB_DIR` cases run in child processes of this binary.
//! Needs ISA-L installed (libisal2, from `scripts/setup.sh`).

use std::path::{Path, PathBuf};
use std::process::Command;

use isal_sys::LoadError;

/// Set in a child: the `ISAL_LIB_DIR` it was started with, to check `load` against.
const CHILD_DIR: &str = "KPRESS_ISAL_SYS_LOADER_DIR";

/// The libisal this host's loader finds (this test needs libisal2 installed).
fn system_library() -> PathBuf {
    let lib = isal_sys::load().expect("libisal.so.2 through the system loader (libisal2)");
    lib.mapped_file().expect("libisal is mapped")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kpress-isal-sys-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_system_loader_finds_it_by_soname() {
    if std::env::var_os("ISAL_LIB_DIR").is_some() {
        return;
    }
    let lib = isal_sys::load().expect("libisal.so.2 through the system loader (libisal2)");
    assert_eq!(lib.path(), Path::new(isal_sys::LIBRARY_FILE));
    let mapped = system_library();
    assert!(
        mapped
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(isal_sys::LIBRARY_FILE),
        "{}",
        mapped.display()
    );
    assert_eq!(isal_sys::search_dirs(), [None]);
}

#[test]
fn a_directory_is_opened_or_refused_with_the_reason() {
    let system = system_library();

    let copy = scratch("copy");
    std::fs::copy(&system, copy.join(isal_sys::LIBRARY_FILE)).unwrap();
    let lib = isal_sys::load_from_dir(&copy).unwrap();
    assert_eq!(lib.path(), copy.join(isal_sys::LIBRARY_FILE));

    let empty = scratch("empty");
    let err = isal_sys::load_from_dir(&empty).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(&err, LoadError::NotFound { searched } if searched == &[empty.display().to_string()])
            && msg.contains("libisal.so.2 not found")
            && msg.contains("ISAL_LIB_DIR"),
        "{msg}"
    );

    // A file that is no ELF object (what a mount over the library leaves).
    let blank = scratch("blank");
    std::fs::write(blank.join(isal_sys::LIBRARY_FILE), b"").unwrap();
    let err = isal_sys::load_from_dir(&blank).unwrap_err();
    assert!(
        matches!(&err, LoadError::Open { reason, .. } if reason.contains("file too short")),
        "{err}"
    );

    // A shared library, but not ISA-L: the first missing function is named.
    let zlib = Path::new("/lib/x86_64-linux-gnu/libz.so.1");
    if zlib.is_file() {
        let other = scratch("other");
        std::fs::copy(zlib, other.join(isal_sys::LIBRARY_FILE)).unwrap();
        let err = isal_sys::load_from_dir(&other).unwrap_err();
        assert!(
            matches!(&err, LoadError::Open { reason, .. }
                if reason.contains("undefined symbol: isal_deflate_stateless_init")),
            "{err}"
        );
        std::fs::remove_dir_all(&other).unwrap();
    }
    for dir in [copy, empty, blank] {
        std::fs::remove_dir_all(dir).unwrap();
    }
}

/// Runs this test alone in a child with `ISAL_LIB_DIR` set to `dir`.
fn run_child(dir: &Path) {
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "the_override_directory_is_the_only_place_searched",
            "--nocapture",
        ])
        .env("ISAL_LIB_DIR", dir)
        .env(CHILD_DIR, dir)
        .output()
        .unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success() && report.contains("1 passed"),
        "{report}"
    );
}

#[test]
fn the_override_directory_is_the_only_place_searched() {
    let Some(dir) = std::env::var_os(CHILD_DIR).map(PathBuf::from) else {
        let system = system_library();
        let empty = scratch("override-empty");
        run_child(&empty);
        let copy = scratch("override-copy");
        std::fs::copy(&system, copy.join(isal_sys::LIBRARY_FILE)).unwrap();
        run_child(&copy);
        for dir in [empty, copy] {
            std::fs::remove_dir_all(dir).unwrap();
        }
        return;
    };
    assert_eq!(isal_sys::search_dirs(), [Some(dir.clone())]);
    if dir.join(isal_sys::LIBRARY_FILE).is_file() {
        let lib = isal_sys::load().expect("the copy in ISAL_LIB_DIR");
        assert_eq!(lib.path(), dir.join(isal_sys::LIBRARY_FILE));
        let mapped = lib.mapped_file().unwrap();
        assert_eq!(
            mapped.parent().unwrap().canonicalize().unwrap(),
            dir.canonicalize().unwrap()
        );
    } else {
        // The system's copy is there, but an operator's directory is never replaced.
        let err = isal_sys::load().unwrap_err();
        assert_eq!(
            err,
            LoadError::NotFound {
                searched: vec![dir.display().to_string()]
            }
        );
    }
}
