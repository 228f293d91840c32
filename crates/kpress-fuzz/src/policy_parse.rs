//! `policy_parse`: the policy file parser (`kpress_config::parse`) on arbitrary text.

use kpress_batch::PolicyLookup;
use kpress_config::{parse, ConfigError, PolicySet};

const SOURCE: &str = "fuzz.toml";

/// Topics a parsed policy is asked about.
const TOPICS: [&str; 5] = ["logs.app", "orders", "a", "", "re:x"];

/// Input: the policy file's text (invalid UTF-8 replaced, so every input is text).
///
/// Invariants: no panic; an invalid file reports at least one problem, each naming
/// the source and a line and column inside the text (1-based, the column at most one
/// past the line's last character); every problem is printed as `SOURCE:LINE:COL: `.
/// A valid file compiles into a `PolicySet` that answers any topic.
pub fn policy_parse(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match parse(&text, SOURCE) {
        Ok(config) => {
            let set = PolicySet::new(&config);
            for topic in TOPICS {
                set.policy_for(topic);
            }
        }
        Err(ConfigError::Invalid(problems)) => {
            assert!(
                !problems.is_empty(),
                "an invalid file with no problem reported"
            );
            let lines: Vec<&str> = text.split('\n').collect();
            let printed = ConfigError::Invalid(problems.clone()).to_string();
            for problem in &problems {
                assert_eq!(problem.source_name, SOURCE);
                let line = problem
                    .line
                    .checked_sub(1)
                    .and_then(|i| lines.get(i))
                    .unwrap_or_else(|| {
                        panic!(
                            "problem on line {} of {}: {problem}",
                            problem.line,
                            lines.len()
                        )
                    });
                let columns = line.chars().count() + 1;
                assert!(
                    (1..=columns).contains(&problem.column),
                    "problem at column {} of a {columns}-column line: {problem}",
                    problem.column
                );
                assert!(!problem.message.is_empty(), "a problem without a message");
                let location = format!("{SOURCE}:{}:{}: ", problem.line, problem.column);
                assert!(
                    problem.to_string().starts_with(&location) && printed.contains(&location),
                    "problem not printed at its location: {problem}"
                );
            }
        }
        Err(e) => panic!("parsing text reported a read error: {e}"),
    }
}
