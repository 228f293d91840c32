//! The accelerator libraries are optional at run time: the built `kpress` binary links
//! neither ISA-L nor QATzip (`ldd`), and on a host where `libisal.so.2` cannot be
//! opened, `kpress check-config` reports the `isal` gzip provider unavailable with
//! the loader's reason, and refuses a policy naming `isal` (as it refuses `qat` where
//! QATzip is missing), while the built-in providers and `auto` still work.
//!
//! "A host without ISA-L" is this machine seen from a private mount namespace
//! (`unshare --mount`) in which `/dev/null` is bind-mounted over every `libisal.so*`
//! file the dynamic loader could open (its cache's entries and the standard library
//! directories), so the loader finds no usable ISA-L. Making the namespace needs root,
//! as the dev machine and CI run; elsewhere the test fails saying so.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kpress_tests::kpress::kpress_binary;
use serde_json::Value;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_binary_links_no_accelerator_library() {
    let binary = kpress_binary();
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .expect("ldd (libc-bin) runs");
    let listing = text(&out.stdout);
    assert!(
        out.status.success(),
        "ldd {}: {}",
        binary.display(),
        text(&out.stderr)
    );
    println!("ldd {}:\n{listing}", binary.display());
    assert!(listing.contains("libc.so.6"), "{listing}");
    for accelerator in ["libisal", "libqatzip", "libqat.so", "libusdm"] {
        assert!(
            !listing.contains(accelerator),
            "kpress links {accelerator}:\n{listing}"
        );
    }
}

/// Every `libisal.so*` the dynamic loader could open: its cache's entries and the
/// files in the standard library directories, canonical (a mount lands on the file a
/// symbolic link names).
fn isal_files() -> BTreeSet<PathBuf> {
    let mut files = BTreeSet::new();
    let cache = Command::new("ldconfig")
        .arg("-p")
        .output()
        .expect("ldconfig -p");
    for line in text(&cache.stdout).lines() {
        if let Some((name, path)) = line.trim().split_once(" => ") {
            if name.starts_with("libisal.so") {
                files.insert(PathBuf::from(path));
            }
        }
    }
    for dir in [
        "/lib",
        "/lib64",
        "/usr/lib",
        "/usr/lib64",
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/local/lib",
        "/usr/local/lib64",
    ] {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with("libisal.so")
            {
                files.insert(entry.path());
            }
        }
    }
    files
        .into_iter()
        .filter_map(|f| f.canonicalize().ok())
        .filter(|f| f.is_file())
        .collect()
}

/// Runs `kpress ARGS` in a private mount namespace where every file of `hidden` is
/// `/dev/null`, without `ISAL_LIB_DIR` or `LD_LIBRARY_PATH` to lead the loader
/// elsewhere; `env` adds variables.
fn kpress_without(hidden: &BTreeSet<PathBuf>, args: &[&str], env: &[(&str, &Path)]) -> Output {
    // `unshare --mount` makes the namespace's mounts private: nothing leaks to the host.
    let script = r#"
        for f in $HIDDEN; do mount --bind /dev/null "$f" || exit 97; done
        exec "$KPRESS" "$@"
    "#;
    let hidden: Vec<String> = hidden.iter().map(|p| p.display().to_string()).collect();
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        "sh",
    ])
    .args(args)
    .env("HIDDEN", hidden.join(" "))
    .env("KPRESS", kpress_binary())
    .env_remove("ISAL_LIB_DIR")
    .env_remove("LD_LIBRARY_PATH")
    .env_remove("KPRESS_LOG");
    for (key, value) in env {
        cmd.env(key, value);
    }
    let out = cmd.output().expect("unshare (util-linux) runs");
    assert_ne!(
        out.status.code(),
        Some(97),
        "bind-mounting /dev/null over {hidden:?} failed: {}",
        text(&out.stderr)
    );
    out
}

fn policy(dir: &Path, name: &str, provider: Option<&str>) -> PathBuf {
    let line = provider.map_or(String::new(), |p| {
        format!("compression.gzip.provider = \"{p}\"\n")
    });
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "[listener]\nbind = \"127.0.0.1:0\"\nnode_port_base = 30000\n[upstream]\nbootstrap_servers = [\"127.0.0.1:9092\"]\n[[topics]]\nmatch = \"g\"\ncompression.type = \"gzip\"\n{line}"
        ),
    )
    .unwrap();
    path
}

/// `check-config --format json`'s document.
fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "check-config --format json printed no JSON ({e}): {}{}",
            text(&out.stdout),
            text(&out.stderr)
        )
    })
}

fn provider<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["gzip_providers"]
        .as_array()
        .and_then(|all| all.iter().find(|p| p["provider"] == name))
        .unwrap_or_else(|| panic!("no {name} in {report:#}"))
}

/// The one problem of the one file `check-config` was given.
fn only_problem(report: &Value) -> String {
    let problems = report["files"][0]["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{report:#}");
    problems[0]["message"].as_str().unwrap().to_owned()
}

#[test]
fn without_isal_the_provider_is_unavailable_and_a_policy_naming_it_is_refused() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "this test hides libisal in a private mount namespace (unshare --mount, bind \
         mounts), which needs root: run it as root, as the dev machine and CI do"
    );
    let hidden = isal_files();
    assert!(
        !hidden.is_empty(),
        "no libisal.so* on this host: scripts/setup.sh installs libisal2, which this \
         test needs to show that hiding it is what makes `isal` unavailable"
    );
    let dir = tempfile::tempdir().unwrap();
    let plain = policy(dir.path(), "plain.toml", None);
    let plain = plain.to_str().unwrap();

    // The host itself: ISA-L available, so what follows is the namespace's doing.
    let out = Command::new(kpress_binary())
        .args(["check-config", "--format", "json", plain])
        .env_remove("ISAL_LIB_DIR")
        .output()
        .unwrap();
    let report = json(&out);
    assert_eq!(provider(&report, "isal")["available"], true, "{report:#}");

    // Without ISA-L: the policy that does not name it is fine, and isal is listed
    // unavailable with the loader's reason.
    let out = kpress_without(&hidden, &["check-config", "--format", "json", plain], &[]);
    let report = json(&out);
    assert!(out.status.success(), "{report:#}\n{}", text(&out.stderr));
    let isal = provider(&report, "isal");
    let detail = isal["detail"].as_str().unwrap();
    println!("isal without libisal: {isal}");
    assert_eq!(isal["available"], false, "{report:#}");
    assert!(
        detail.starts_with("ISA-L library libisal.so.2") && detail.contains("could not be opened"),
        "{detail}"
    );
    for built_in in ["libdeflate", "zlib"] {
        assert_eq!(provider(&report, built_in)["available"], true, "{report:#}");
    }
    // The text listing says the same.
    let out = kpress_without(&hidden, &["check-config", plain], &[]);
    let listing = text(&out.stdout);
    assert!(out.status.success(), "{listing}{}", text(&out.stderr));
    assert!(
        listing.contains(&format!("  isal: unavailable: {detail}\n")),
        "{listing}"
    );

    // A policy naming isal is refused, located, with the providers this host has;
    // auto and the built-in providers are accepted.
    let named = policy(dir.path(), "isal.toml", Some("isal"));
    let named = named.to_str().unwrap();
    let out = kpress_without(&hidden, &["check-config", "--format", "json", named], &[]);
    let report = json(&out);
    assert_eq!(out.status.code(), Some(1), "{report:#}");
    let message = only_problem(&report);
    println!("check-config of a policy naming isal, without libisal: {message}");
    assert!(
        message.starts_with(
            "provider named explicitly but not available on this host: gzip provider isal is not available: ISA-L library libisal.so.2"
        ) && !message.contains("isal, "),
        "{message}"
    );
    let out = kpress_without(&hidden, &["run", "--config", named], &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("gzip provider isal is not available") && stderr.contains("not starting"),
        "{stderr}"
    );
    for accepted in ["auto", "libdeflate", "zlib"] {
        let path = policy(dir.path(), &format!("{accepted}.toml"), Some(accepted));
        let out = kpress_without(
            &hidden,
            &["check-config", "--format", "json", path.to_str().unwrap()],
            &[],
        );
        assert!(out.status.success(), "{accepted}: {:#}", json(&out));
    }

    // qat where QATzip is missing is refused the same way, by the same check.
    let no_qatzip = tempfile::tempdir().unwrap();
    let qat = policy(dir.path(), "qat.toml", Some("qat"));
    let out = kpress_without(
        &hidden,
        &["check-config", "--format", "json", qat.to_str().unwrap()],
        &[("QATZIP_LIB_DIR", no_qatzip.path())],
    );
    let qat_message = only_problem(&json(&out));
    assert!(
        qat_message.starts_with(
            "provider named explicitly but not available on this host: gzip provider qat is not available: "
        ),
        "{qat_message}"
    );
}
