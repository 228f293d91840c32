//! The `[shadow]` table: what-if trials of live batches.

use kpress_config::{
    parse, SHADOW_MAX_CPU_FRACTION_DEFAULT, SHADOW_MAX_QUEUE_BYTES_DEFAULT, SHADOW_SAMPLE_DEFAULT,
    SHADOW_THREADS_DEFAULT,
};

mod common;

use common::{one_problem, problem_texts, HEAD};

#[test]
fn no_shadow_section_is_no_trials() {
    assert_eq!(parse(HEAD, "t.toml").unwrap().shadow, None);
}

#[test]
fn candidates_are_specs_in_canonical_form_and_the_rest_has_defaults() {
    let text = format!("{HEAD}[shadow]\ncandidates = [\"zstd\", \"gzip:zlib:1\", \"lz4:9\"]\n");
    let shadow = parse(&text, "t.toml").unwrap().shadow.unwrap();
    let labels: Vec<String> = shadow.candidates.iter().map(|c| c.to_string()).collect();
    assert_eq!(labels, ["zstd:3", "gzip:1:zlib", "lz4:9"]);
    assert_eq!(shadow.sample, SHADOW_SAMPLE_DEFAULT);
    assert_eq!(shadow.max_cpu_fraction, SHADOW_MAX_CPU_FRACTION_DEFAULT);
    assert_eq!(shadow.threads, SHADOW_THREADS_DEFAULT);
    assert_eq!(shadow.max_queue_bytes, SHADOW_MAX_QUEUE_BYTES_DEFAULT);
    let text = format!(
        "{HEAD}[shadow]\ncandidates = [\"none\"]\nsample = 1\nmax_cpu_fraction = 0.001\nthreads = 2\nmax_queue_bytes = 65536\n"
    );
    let shadow = parse(&text, "t.toml").unwrap().shadow.unwrap();
    assert_eq!(
        (
            shadow.sample,
            shadow.max_cpu_fraction,
            shadow.threads,
            shadow.max_queue_bytes
        ),
        (1.0, 0.001, 2, 65536)
    );
}

#[test]
fn bad_values_name_the_key_the_value_and_the_allowed_range() {
    let p = one_problem(&format!(
        "{HEAD}[shadow]\ncandidates = [\"zstd:3\"]\nsample = 0.0\n"
    ));
    assert_eq!(
        p,
        "t.toml:9:10: shadow.sample = 0.0: out of range (allowed: 0 < sample <= 1)"
    );
    let p = one_problem(&format!(
        "{HEAD}[shadow]\ncandidates = [\"zstd:3\"]\nsample = 1.5\n"
    ));
    assert!(p.contains("shadow.sample = 1.5: out of range"), "{p}");
    let p = one_problem(&format!(
        "{HEAD}[shadow]\ncandidates = [\"zstd:3\"]\nmax_cpu_fraction = 0.0001\n"
    ));
    assert!(
        p.contains("shadow.max_cpu_fraction = 0.0001: out of range (allowed: 0.001..1)"),
        "{p}"
    );
    let p = one_problem(&format!(
        "{HEAD}[shadow]\ncandidates = [\"zstd:3\"]\nsample = \"often\"\n"
    ));
    assert!(p.contains("must be a number, not string"), "{p}");
    let p = one_problem(&format!(
        "{HEAD}[shadow]\ncandidates = [\"zstd:3\"]\nthreads = 0\n"
    ));
    assert!(
        p.contains("shadow.threads = 0: out of range (allowed: 1..64)"),
        "{p}"
    );
    let p = one_problem(&format!(
        "{HEAD}[shadow]\ncandidates = [\"zstd:3\"]\nmax_queue_bytes = 10\n"
    ));
    assert!(p.contains("(allowed: 65536..1073741824)"), "{p}");
    let p = one_problem(&format!(
        "{HEAD}[shadow]\ncandidates = [\"zstd:3\"]\nsampel = 1\n"
    ));
    assert!(
        p.contains("shadow.sampel") && p.contains("did you mean sample"),
        "{p}"
    );
}

#[test]
fn an_auto_rule_supplies_the_candidates_a_shadow_section_leaves_out() {
    let text = format!("{HEAD}[defaults]\ncompression.type = \"auto\"\n\n[shadow]\nsample = 0.5\n");
    let config = parse(&text, "t.toml").unwrap();
    assert!(config.shadow.as_ref().unwrap().candidates.is_empty());
    let trials = config.trial_settings().unwrap();
    let labels: Vec<String> = trials.candidates.iter().map(|c| c.to_string()).collect();
    assert_eq!(labels, ["zstd:3", "lz4:9", "gzip:6", "snappy"]);
    assert_eq!(trials.sample, 0.5);
}

#[test]
fn candidates_are_required_checked_and_distinct() {
    let p = one_problem(&format!("{HEAD}[shadow]\nsample = 0.5\n"));
    assert!(
        p.contains("shadow.candidates: missing key in [shadow]"),
        "{p}"
    );
    let p = one_problem(&format!("{HEAD}[shadow]\ncandidates = []\n"));
    assert!(p.contains("has 0 candidates"), "{p}");
    let many: Vec<String> = (1..=17).map(|l| format!("\"zstd:{l}\"")).collect();
    let p = one_problem(&format!(
        "{HEAD}[shadow]\ncandidates = [{}]\n",
        many.join(", ")
    ));
    assert!(p.contains("has 17 candidates"), "{p}");
    let p = one_problem(&format!("{HEAD}[shadow]\ncandidates = \"zstd:3\"\n"));
    assert!(
        p.contains("must be an array of spec strings, not string"),
        "{p}"
    );
    let problems = problem_texts(&format!(
        "{HEAD}[shadow]\ncandidates = [\"zstd:3\", \"brotli:5\", \"zstd\", \"zstd:99\"]\n"
    ));
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(
        problems[0].contains("unknown codec \"brotli\""),
        "{}",
        problems[0]
    );
    assert!(
        problems[1].contains("\"zstd\" repeats the candidate zstd:3"),
        "{}",
        problems[1]
    );
    assert!(problems[2].contains("zstd:99"), "{}", problems[2]);
    assert!(
        problems[2].contains("allowed: 1..16 distinct specs"),
        "{}",
        problems[2]
    );
}
