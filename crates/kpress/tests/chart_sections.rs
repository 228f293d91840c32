//! The Helm chart rolls pods only for a policy change a reload cannot apply: its
//! restart checksum leaves out exactly the sections kpress applies live, and its
//! comments name the same sections.

use std::collections::BTreeSet;
use std::path::PathBuf;

use kpress_config::LIVE_SECTIONS;

fn chart_file(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/helm/kpress")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

fn live() -> BTreeSet<String> {
    LIVE_SECTIONS.iter().map(|s| s.to_string()).collect()
}

/// How a comment writes a section: `[[topics]]` and `[[clients]]` are arrays of tables.
fn written(section: &str) -> String {
    match section {
        "topics" | "clients" => format!("[[{section}]]"),
        _ => format!("[{section}]"),
    }
}

#[test]
fn the_restart_checksum_omits_exactly_the_live_sections() {
    let helpers = chart_file("templates/_helpers.tpl");
    let omit = helpers
        .lines()
        .find(|line| line.contains("omit $document"))
        .expect("the restart checksum's omit line");
    let omitted: BTreeSet<String> = omit
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    assert_eq!(omitted, live(), "{omit}");
}

#[test]
fn the_chart_comments_name_every_live_section() {
    let helpers = chart_file("templates/_helpers.tpl");
    let values = chart_file("values.yaml");
    let checksum_comment = helpers
        .split("{{/*")
        .find(|comment| comment.contains("restart"))
        .expect("the restart checksum's comment");
    let rules_comment: String = values
        .lines()
        .skip_while(|line| !line.starts_with("# What kpress does per topic"))
        .take_while(|line| line.starts_with('#'))
        .collect::<Vec<_>>()
        .join(" ");
    for section in LIVE_SECTIONS {
        let section = written(section);
        assert!(
            checksum_comment.contains(&section),
            "the checksum's comment leaves out {section}"
        );
        assert!(
            rules_comment.contains(&section),
            "values.yaml's rules comment leaves out {section}"
        );
    }
}
