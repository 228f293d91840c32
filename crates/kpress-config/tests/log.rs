//! The `[log]` table: the level kpress logs at when no flag or environment variable
//! names one.

use kpress_config::{parse, LOG_LEVELS};

mod common;

use common::{one_problem, HEAD};

#[test]
fn log_level_is_optional_and_takes_tracings_levels() {
    assert_eq!(parse(HEAD, "t.toml").unwrap().log.level, None);
    for level in LOG_LEVELS {
        let config = parse(&format!("{HEAD}[log]\nlevel = \"{level}\"\n"), "t.toml").unwrap();
        assert_eq!(config.log.level, Some(level));
    }
    assert_eq!(
        parse(&format!("{HEAD}[log]\n"), "t.toml")
            .unwrap()
            .log
            .level,
        None
    );
}

#[test]
fn a_bad_log_level_names_the_key_value_and_the_allowed_ones() {
    let problem = one_problem(&format!("{HEAD}[log]\nlevel = \"loud\"\n"));
    assert!(problem.contains("log.level"), "{problem}");
    assert!(problem.contains("loud"), "{problem}");
    assert!(
        problem.contains(r#""off", "error", "warn", "info", "debug", "trace""#),
        "{problem}"
    );
    let problem = one_problem(&format!("{HEAD}[log]\nlevel = \"INFO\"\n"));
    assert!(problem.contains(r#"write "info""#), "{problem}");
    let problem = one_problem(&format!("{HEAD}[log]\nformat = \"json\"\n"));
    assert!(problem.contains("format"), "{problem}");
}
