//! Where things are: the workspace root, the `.cache` that `scripts/setup.sh` fills,
//! the Kafka jars and compiled Java test clients per version, the datasets, and
//! a scratch directory under `target/` for files shared by a test run.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The versions `scripts/versions.sh` pins, read from that file so they never drift.
const VERSIONS_SH: &str = include_str!("../../scripts/versions.sh");

fn pinned(name: &str) -> &'static str {
    VERSIONS_SH
        .lines()
        .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix('='))
        .map(str::trim)
        .unwrap_or_else(|| panic!("scripts/versions.sh does not set {name}"))
}

/// The current Kafka version the tests run against (`KAFKA_VERSION`, e.g. 4.1.1).
pub fn kafka_version() -> &'static str {
    pinned("KAFKA_VERSION")
}

/// The older Kafka version kept for compatibility tests (`KAFKA_OLD_VERSION`, e.g. 3.9.1).
pub fn kafka_old_version() -> &'static str {
    pinned("KAFKA_OLD_VERSION")
}

/// The workspace root (the directory holding the root `Cargo.toml` and `scripts/`).
pub fn workspace_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("tests/ has a parent")
            .to_path_buf()
    })
}

/// `.cache/` at the workspace root, filled by `scripts/setup.sh`.
pub fn cache_dir() -> PathBuf {
    workspace_root().join(".cache")
}

fn require(path: PathBuf, what: &str) -> PathBuf {
    if !path.exists() {
        panic!(
            "{what} not found at {}: run scripts/setup.sh (it installs and caches everything the tests need)",
            path.display()
        );
    }
    path
}

/// The directory of Kafka's jars for `version` (`.cache/kafka/<version>/libs`).
pub fn kafka_libs(version: &str) -> PathBuf {
    let dir = cache_dir().join("kafka").join(version);
    require(dir.join(".complete"), &format!("Kafka {version} jars"));
    dir.join("libs")
}

/// Our Java test clients (tests/java) compiled against `version`'s kafka-clients.
pub fn java_test_clients(version: &str) -> PathBuf {
    let dir = cache_dir().join("kafka").join(version).join("test-clients");
    require(
        dir.join("KpressClient.class"),
        &format!("the Java test client compiled for Kafka {version}"),
    );
    dir
}

/// The Python of the venv that holds confluent-kafka.
pub fn venv_python() -> PathBuf {
    require(
        cache_dir().join("venv").join("bin").join("python"),
        "the confluent-kafka venv",
    )
}

/// A test support file in the source tree (e.g. `tests/python/ck_client.py`).
pub fn tests_file(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// The datasets: `$KPRESS_DATASETS`, else the repository's `datasets/`.
pub fn datasets_dir() -> PathBuf {
    let dir = std::env::var_os("KPRESS_DATASETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("datasets"));
    assert!(
        dir.join("apache_access.log").exists(),
        "datasets not found in {}: KPRESS_DATASETS must name a directory holding \
         apache_access.log and nginxplus_status.ndjson",
        dir.display()
    );
    dir
}

/// The cargo target directory this test binary was built into (`target/`).
pub fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    workspace_root().join("target")
}

/// The profile directory this test binary lives in (`target/debug` for `cargo test`),
/// found from the running executable (`target/<profile>/deps/<test>-<hash>`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| target_dir().join("debug"))
}

/// A scratch directory shared by a test run (`target/kpress-tests`), for files that are
/// the same for every test (client log configs) and never hold test data.
pub fn scratch_dir() -> PathBuf {
    let dir = target_dir().join("kpress-tests");
    std::fs::create_dir_all(&dir).expect("create target/kpress-tests");
    dir
}

/// Writes `contents` to `path` through a rename, so concurrent test binaries never see
/// half a file.
pub fn write_atomically(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)
}
