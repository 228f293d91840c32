//! The system's library search finds QATzip before the project cache that
//! `scripts/setup.sh` fills: a binary never prefers a path known at build time over
//! what the host's dynamic loader finds. The test runs itself again in a child
//! process whose `LD_LIBRARY_PATH` (read by the loader at process start) names a copy
//! of the cached QATzip, and checks which file the child maps.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Set in the child: the directory its loader path names.
const CHILD_DIR: &str = "KPRESS_QAT_SYS_SEARCH_ORDER_DIR";
/// Set in the child when that directory holds QATzip without the libraries it needs.
const CHILD_BROKEN: &str = "KPRESS_QAT_SYS_SEARCH_ORDER_BROKEN";

fn cache_dir() -> PathBuf {
    kpress_tests::paths::cache_dir().join("qatzip/root/usr/lib/x86_64-linux-gnu")
}

/// Copies QATzip and, unless `alone`, the libraries it ships with (by their sonames)
/// into `dir`.
fn copy_qatzip(dir: &Path, alone: bool) {
    let names: &[&str] = if alone {
        &[qat_sys::LIBRARY_FILE]
    } else {
        &[qat_sys::LIBRARY_FILE, "libqat.so.4", "libusdm.so.0"]
    };
    for name in names {
        let from = cache_dir().join(name);
        std::fs::copy(&from, dir.join(name)).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (scripts/setup.sh caches QATzip there)",
                from.display()
            )
        });
    }
}

/// Runs `test` of this binary in a child whose loader path is a fresh directory
/// holding QATzip (`alone`: without its companions); returns the child's output.
fn run_child(test: &str, alone: bool) -> String {
    let dir = std::env::temp_dir().join(format!(
        "kpress-qat-sys-order-{}-{alone}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    copy_qatzip(&dir, alone);
    let mut child = Command::new(std::env::current_exe().unwrap());
    child
        .args(["--exact", test, "--nocapture"])
        .env(CHILD_DIR, &dir)
        .env("LD_LIBRARY_PATH", &dir)
        .env_remove("QATZIP_LIB_DIR");
    if alone {
        child.env(CHILD_BROKEN, "1");
    }
    let output = child.output().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success() && report.contains("1 passed"),
        "{report}"
    );
    report
}

#[test]
fn the_system_loader_path_is_searched_before_the_project_cache() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        run_child(
            "the_system_loader_path_is_searched_before_the_project_cache",
            false,
        );
        run_child(
            "the_system_loader_path_is_searched_before_the_project_cache",
            true,
        );
        return;
    };
    if std::env::var_os(CHILD_BROKEN).is_some() {
        // Found by the loader but unusable: said so, not replaced by the cache's.
        let err = qat_sys::load().unwrap_err();
        assert!(
            matches!(&err, qat_sys::LoadError::Open { path, reason }
                if path == qat_sys::LIBRARY_FILE
                    && (reason.contains("libqat.so.4") || reason.contains("libusdm.so.0"))),
            "{err}"
        );
        return;
    }
    let lib = qat_sys::load().expect("QATzip on LD_LIBRARY_PATH");
    let mapped = lib.mapped_file().expect("libqatzip is mapped");
    assert_eq!(lib.path(), Path::new(qat_sys::LIBRARY_FILE));
    assert_eq!(
        mapped.parent().unwrap().canonicalize().unwrap(),
        Path::new(&dir).canonicalize().unwrap(),
        "mapped {}",
        mapped.display()
    );
}

#[test]
fn search_dirs_name_the_override_alone_else_the_system_first() {
    let dirs = qat_sys::search_dirs();
    match std::env::var_os("QATZIP_LIB_DIR") {
        Some(dir) => assert_eq!(dirs, [Some(PathBuf::from(dir))]),
        None => {
            assert_eq!(dirs.first(), Some(&None), "{dirs:?}");
            assert!(dirs.len() <= 2, "{dirs:?}");
        }
    }
}
