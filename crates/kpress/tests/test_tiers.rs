//! Every test binary of the workspace is in exactly one tier of `.config/nextest.toml`,
//! so a new test file cannot be forgotten: `hermetic` (needs only Rust and a C
//! compiler; every binary outside kpress-tests, what `cargo test --workspace --exclude
//! kpress-tests` runs) or `real` (needs what scripts/setup.sh installs; every
//! kpress-tests binary). Every kpress-tests test binary has a `slow-timeout` override
//! giving its usual duration, and every `.rs` file at the top of `tests/` is one of
//! kpress-tests' `[[test]]` targets (a file left out of tests/Cargo.toml never runs).
//! The binaries come from `cargo metadata`, named as nextest names them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use toml::de::{DeTable, DeValue};

/// The package whose binaries are the real tier.
const REAL_PACKAGE: &str = "kpress-tests";
const TIERS: [&str; 2] = ["hermetic", "real"];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root")
}

/// One test binary, as `cargo test` builds it.
#[derive(Debug, Clone)]
struct Binary {
    package: String,
    /// `lib`, `bin` or `test`.
    kind: String,
    source: PathBuf,
}

/// What `.config/nextest.toml` says about the binaries.
#[derive(Debug, Default)]
struct Config {
    /// Tier name → the binary ids its filter lists, in order (duplicates kept).
    tiers: BTreeMap<String, Vec<String>>,
    /// Binary ids named by an override that sets `slow-timeout`.
    timed: BTreeSet<String>,
}

fn table<'a, 'i>(t: &'a DeTable<'i>, key: &str) -> Option<&'a DeTable<'i>> {
    match t.get(key)?.get_ref() {
        DeValue::Table(t) => Some(t),
        _ => None,
    }
}

fn string<'a>(t: &'a DeTable<'_>, key: &str) -> Option<&'a str> {
    match t.get(key)?.get_ref() {
        DeValue::String(s) => Some(s.as_ref()),
        _ => None,
    }
}

/// The ids inside every `binary_id(...)` of a filterset.
fn binary_ids(filter: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut rest = filter;
    while let Some(at) = rest.find("binary_id(") {
        rest = &rest[at + "binary_id(".len()..];
        let end = rest.find(')').unwrap_or(rest.len());
        ids.push(rest[..end].trim().to_owned());
        rest = &rest[end..];
    }
    ids
}

fn parse_config(text: &str) -> Result<Config, String> {
    let root = DeTable::parse(text).map_err(|e| e.to_string())?;
    let root = root.get_ref();
    let profiles = table(root, "profile").ok_or("no [profile] tables")?;
    let mut config = Config::default();
    for tier in TIERS {
        let filter = table(profiles, tier)
            .and_then(|p| string(p, "default-filter"))
            .ok_or(format!("no [profile.{tier}] default-filter"))?;
        // Only a plain list, so that what the tier holds is what this test reads.
        for term in filter.split('|').map(str::trim) {
            if !(term.starts_with("binary_id(") && term.ends_with(')')) {
                return Err(format!(
                    "[profile.{tier}] default-filter: {term:?} is not binary_id(...); \
                     a tier's filter lists binaries joined by |"
                ));
            }
        }
        config.tiers.insert(tier.to_owned(), binary_ids(filter));
    }
    let default = table(profiles, "default").ok_or("no [profile.default]")?;
    if let Some(overrides) = default.get("overrides") {
        let DeValue::Array(overrides) = overrides.get_ref() else {
            return Err("profile.default.overrides is not an array of tables".into());
        };
        for o in overrides {
            let DeValue::Table(o) = o.get_ref() else {
                return Err("profile.default.overrides holds a non-table".into());
            };
            if o.contains_key("slow-timeout") {
                config
                    .timed
                    .extend(binary_ids(string(o, "filter").unwrap_or_default()));
            }
        }
    }
    Ok(config)
}

/// The workspace's test binaries by nextest id, and kpress-tests' directory.
fn workspace_binaries() -> (BTreeMap<String, Binary>, PathBuf) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let out = Command::new(cargo)
        .current_dir(workspace_root())
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let mut binaries = BTreeMap::new();
    let mut real_dir = None;
    for package in metadata["packages"].as_array().expect("packages") {
        let name = package["name"].as_str().expect("package name");
        if name == REAL_PACKAGE {
            let manifest = PathBuf::from(package["manifest_path"].as_str().unwrap());
            real_dir = Some(manifest.parent().unwrap().to_path_buf());
        }
        for target in package["targets"].as_array().expect("targets") {
            if target["test"] != Value::Bool(true) {
                continue;
            }
            let target_name = target["name"].as_str().unwrap();
            let kinds: Vec<&str> = target["kind"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let (kind, id) = if kinds
                .iter()
                .any(|k| k.ends_with("lib") || *k == "proc-macro")
            {
                ("lib", name.to_owned())
            } else if kinds.contains(&"bin") {
                ("bin", format!("{name}::bin/{target_name}"))
            } else if kinds.contains(&"test") {
                ("test", format!("{name}::{target_name}"))
            } else {
                continue;
            };
            let binary = Binary {
                package: name.to_owned(),
                kind: kind.to_owned(),
                source: PathBuf::from(target["src_path"].as_str().unwrap()),
            };
            binaries.insert(id, binary);
        }
    }
    (
        binaries,
        real_dir.expect("kpress-tests is a workspace member"),
    )
}

/// Everything wrong with the tiers, one sentence each.
fn problems(
    config: &Config,
    binaries: &BTreeMap<String, Binary>,
    real_dir_files: &BTreeSet<PathBuf>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut tier_of: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (tier, ids) in &config.tiers {
        let mut seen = BTreeSet::new();
        for id in ids {
            if !seen.insert(id) {
                problems.push(format!("{id} is listed twice in the {tier} tier"));
            }
            match binaries.get(id) {
                None => problems.push(format!(
                    "the {tier} tier names {id}, which is no test binary of the workspace \
                     (renamed or removed?)"
                )),
                Some(b) if tier == "hermetic" && b.package == REAL_PACKAGE => {
                    problems.push(format!(
                        "{id} is in the hermetic tier, but `cargo test --workspace --exclude \
                         {REAL_PACKAGE}` never runs it"
                    ))
                }
                Some(b) if tier == "real" && b.package != REAL_PACKAGE => problems.push(format!(
                    "{id} is in the real tier, but `cargo test --workspace --exclude \
                     {REAL_PACKAGE}` runs it: move it into {REAL_PACKAGE} or list it hermetic"
                )),
                Some(_) => {}
            }
            tier_of.entry(id).or_default().push(tier);
        }
    }
    for (id, binary) in binaries {
        match tier_of.get(id.as_str()).map(Vec::len).unwrap_or(0) {
            0 => problems.push(format!(
                "{id} ({}) is in no tier of .config/nextest.toml: list it in \
                 [profile.hermetic] if it needs only Rust and a C compiler, else make it a \
                 {REAL_PACKAGE} binary listed in [profile.real]",
                binary.source.display()
            )),
            1 => {}
            _ => problems.push(format!("{id} is in more than one tier")),
        }
        if binary.package == REAL_PACKAGE && binary.kind == "test" && !config.timed.contains(id) {
            problems.push(format!(
                "{id} has no slow-timeout override in .config/nextest.toml giving its usual \
                 duration"
            ));
        }
    }
    let sources: BTreeSet<&Path> = binaries.values().map(|b| b.source.as_path()).collect();
    for file in real_dir_files {
        if !sources.contains(file.as_path()) {
            problems.push(format!(
                "{} is no [[test]] target of {REAL_PACKAGE}'s Cargo.toml, so it never runs",
                file.display()
            ));
        }
    }
    problems
}

/// The `.rs` files at the top of kpress-tests' directory (each should be a test).
fn top_level_sources(dir: &Path) -> BTreeSet<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect()
}

#[test]
fn every_test_binary_is_in_exactly_one_tier() {
    let path = workspace_root().join(".config/nextest.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let config = parse_config(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (binaries, real_dir) = workspace_binaries();
    assert!(binaries.len() > 40, "{binaries:#?}");
    let problems = problems(&config, &binaries, &top_level_sources(&real_dir));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    println!(
        "{} test binaries: {} hermetic, {} real",
        binaries.len(),
        config.tiers["hermetic"].len(),
        config.tiers["real"].len()
    );
}

/// The check itself fails where it should, on a made-up workspace.
#[test]
fn a_forgotten_binary_a_stale_name_and_an_unlisted_file_are_reported() {
    let config = parse_config(
        r#"
[profile.default]
[[profile.default.overrides]]
filter = "binary_id(kpress-tests::proxy)"
slow-timeout = { period = "160s" }
[profile.hermetic]
default-filter = "binary_id(kpress-codec) | binary_id(kpress-codec::gone) | binary_id(kpress-tests::segments)"
[profile.real]
default-filter = "binary_id(kpress-tests::proxy) | binary_id(kpress-codec)"
"#,
    )
    .unwrap();
    let binary = |package: &str, kind: &str, source: &str| Binary {
        package: package.into(),
        kind: kind.into(),
        source: source.into(),
    };
    let binaries = BTreeMap::from([
        (
            "kpress-codec".to_owned(),
            binary("kpress-codec", "lib", "/w/crates/kpress-codec/src/lib.rs"),
        ),
        (
            "kpress-codec::new_file".to_owned(),
            binary(
                "kpress-codec",
                "test",
                "/w/crates/kpress-codec/tests/new_file.rs",
            ),
        ),
        (
            "kpress-tests::proxy".to_owned(),
            binary(REAL_PACKAGE, "test", "/w/tests/proxy.rs"),
        ),
        (
            "kpress-tests::segments".to_owned(),
            binary(REAL_PACKAGE, "test", "/w/tests/segments.rs"),
        ),
    ]);
    let files = BTreeSet::from([
        PathBuf::from("/w/tests/proxy.rs"),
        PathBuf::from("/w/tests/segments.rs"),
        PathBuf::from("/w/tests/forgotten.rs"),
    ]);
    let found = problems(&config, &binaries, &files);
    let expected = [
        "the hermetic tier names kpress-codec::gone, which is no test binary",
        "kpress-tests::segments is in the hermetic tier, but `cargo test --workspace --exclude kpress-tests` never runs it",
        "kpress-codec is in the real tier, but `cargo test --workspace --exclude kpress-tests` runs it",
        "kpress-codec is in more than one tier",
        "kpress-codec::new_file (/w/crates/kpress-codec/tests/new_file.rs) is in no tier",
        "kpress-tests::segments has no slow-timeout override",
        "/w/tests/forgotten.rs is no [[test]] target of kpress-tests's Cargo.toml",
    ];
    for e in expected {
        assert!(
            found.iter().any(|p| p.starts_with(e)),
            "missing {e:?} in:\n{}",
            found.join("\n")
        );
    }
    assert_eq!(found.len(), expected.len(), "{}", found.join("\n"));

    let err = parse_config(
        "[profile.default]\n[profile.hermetic]\ndefault-filter = \"all()\"\n\
         [profile.real]\ndefault-filter = \"binary_id(a)\"\n",
    )
    .unwrap_err();
    assert!(err.contains("\"all()\" is not binary_id(...)"), "{err}");
}
