//! The documentation cannot drift from the binary. Hermetic: no broker, no network.
//!
//! - The policy reference (`docs/policy.md`) lists exactly the keys a policy file may set
//!   (`kpress_config::accepted_keys`), each with its type, default and allowed values.
//!   Its key tables have `key` as the first header cell; their heading names the TOML
//!   table(s) the keys belong to in backticks (`` `[listener.tls]` ``,
//!   `` `[defaults]` and `[[topics]]` ``), and the first cell holds the key in backticks.
//! - Every ```` ```toml ```` block of the README and of `docs/`, and every `config/*.toml`,
//!   passes `kpress check-config --strict` (no warnings either). A block with both a `[listener]` and an `[upstream]`
//!   header is a complete policy, checked as written; any other block is a fragment,
//!   which must start with a table header and is checked after a minimal `[listener]`
//!   and `[upstream]` (whichever it lacks) are put before it. The certificates, keys,
//!   CAs and password files a policy names are generated next to it first.
//! - Every key a policy file may set is set by at least one of those examples (a key of
//!   `[defaults]` and `[[topics]]` by an example of either).
//! - Every subcommand, option and argument `kpress --help` and each subcommand's
//!   `--help` print is in the CLI chapter (`docs/cli.md`): global options in its
//!   "Global options" section, a subcommand's own in its `` `kpress NAME` `` section,
//!   and every such section names a subcommand that exists.
//! - Every `kpress_*` metric the docs name is one kpress-proxy's metrics files (each
//!   `metrics.rs` under `crates/kpress-proxy/src`) define, and the operations and
//!   shadow-trials chapters name every one they define.
//! - Every relative link of the README and `docs/` reaches a file, and a `#fragment` a
//!   heading of it.
//! - Every metric's `# TYPE` agrees with its name: a `_total` is a counter, and a
//!   counter is a `_total` (types read from where `crates/kpress-proxy` registers each).
//! - Every default the policy reference gives as a literal is kpress's: a policy setting
//!   the key to it parses to the same settings as one leaving it out. Prose quoting a
//!   key's default in the form `` `[limits] max_rewrite_wait_ms` (default 500 ms) `` (or
//!   `(30 s by default)`, or a TOML comment `# … default 0.01`) quotes the reference's.
//! - Every environment variable the crates' sources read is named in the book.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const KPRESS: &str = env!("CARGO_BIN_EXE_kpress");

/// What a fragment lacks, put before it: the two sections every policy needs.
const MINIMAL_LISTENER: &str = "[listener]\nbind = \"127.0.0.1:19092\"\n";
const MINIMAL_UPSTREAM: &str = "[upstream]\nbootstrap_servers = [\"127.0.0.1:9092\"]\n";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The README and every Markdown file under `docs/`, in a stable order.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
            .map(|entry| entry.expect("a directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                out.push(path);
            }
        }
    }
    let root = repo_root();
    let mut files = vec![root.join("README.md")];
    walk(&root.join("docs"), &mut files);
    files
}

fn shown(path: &Path) -> String {
    path.strip_prefix(repo_root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// A Markdown line and whether it sits inside a fenced code block (fences included).
struct Line<'a> {
    number: usize,
    text: &'a str,
    in_code: bool,
}

fn lines(text: &str) -> Vec<Line<'_>> {
    let mut in_fence = false;
    text.lines()
        .enumerate()
        .map(|(i, text)| {
            let fence = text.trim_start().starts_with("```");
            let in_code = in_fence || fence;
            if fence {
                in_fence = !in_fence;
            }
            Line {
                number: i + 1,
                text,
                in_code,
            }
        })
        .collect()
}

/// The texts between backticks in `text`, in order.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// A Markdown table's cells: split at `|` but not at `\|`.
fn cells(row: &str) -> Vec<String> {
    let row = row.trim().trim_start_matches('|');
    let row = row.strip_suffix('|').unwrap_or(row);
    let mut out = vec![String::new()];
    let mut chars = row.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                out.last_mut().unwrap().push('|');
                chars.next();
            }
            '|' => out.push(String::new()),
            c => out.last_mut().unwrap().push(c),
        }
    }
    out.into_iter().map(|cell| cell.trim().to_owned()).collect()
}

struct Table {
    /// The nearest heading above the table, without its `#`s.
    heading: String,
    line: usize,
    header: Vec<String>,
    rows: Vec<(usize, Vec<String>)>,
}

fn tables(text: &str) -> Vec<Table> {
    let lines = lines(text);
    let mut out = Vec::new();
    let mut heading = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = &lines[i];
        if !line.in_code && line.text.starts_with('#') {
            heading = line.text.trim_start_matches('#').trim().to_owned();
        }
        let is_row = |l: &Line<'_>| !l.in_code && l.text.trim_start().starts_with('|');
        if is_row(line) {
            let start = i;
            while i < lines.len() && is_row(&lines[i]) {
                i += 1;
            }
            let block = &lines[start..i];
            out.push(Table {
                heading: heading.clone(),
                line: block[0].number,
                header: cells(block[0].text),
                rows: block
                    .iter()
                    .skip(2)
                    .map(|l| (l.number, cells(l.text)))
                    .collect(),
            });
            continue;
        }
        i += 1;
    }
    out
}

/// The TOML tables a heading names: `` `[listener.tls]` `` gives `listener.tls`,
/// `` `[defaults]` and `[[topics]]` `` gives `defaults` and `topics`.
fn sections_named(heading: &str) -> Vec<String> {
    backticked(heading)
        .into_iter()
        .filter(|t| t.starts_with('[') && t.ends_with(']'))
        .map(|t| t.trim_matches(|c| c == '[' || c == ']').to_owned())
        .collect()
}

#[test]
fn policy_reference_lists_exactly_the_accepted_keys() {
    let path = repo_root().join("docs/policy.md");
    let text = read(&path);
    let mut documented: BTreeMap<String, usize> = BTreeMap::new();
    let mut problems = Vec::new();
    for table in tables(&text)
        .iter()
        .filter(|t| t.header.first().is_some_and(|h| h == "key"))
    {
        let sections = sections_named(&table.heading);
        if sections.is_empty() {
            problems.push(format!(
                "line {}: a key table under \"{}\", a heading that names no `[section]`",
                table.line, table.heading
            ));
            continue;
        }
        let column = |name: &str| table.header.iter().position(|h| h == name);
        let required = ["type", "default", "allowed", "meaning"].map(|name| (name, column(name)));
        for (name, at) in &required {
            if at.is_none() {
                problems.push(format!(
                    "line {}: the key table has no {name} column",
                    table.line
                ));
            }
        }
        for (line, row) in &table.rows {
            let keys = backticked(&row[0]);
            if keys.is_empty() {
                problems.push(format!("line {line}: no `key` in the first cell"));
            }
            for (name, at) in &required {
                if at.is_some_and(|at| row.get(at).is_none_or(|cell| cell.is_empty())) {
                    problems.push(format!("line {line}: {} has no {name}", row[0]));
                }
            }
            for key in keys {
                for section in &sections {
                    documented.insert(format!("{section}.{key}"), *line);
                }
            }
        }
    }
    let accepted: BTreeSet<String> = kpress_config::accepted_keys().into_iter().collect();
    assert!(
        accepted.len() > 40,
        "accepted_keys() lists only {accepted:?}"
    );
    for (key, line) in &documented {
        if !accepted.contains(key) {
            problems.push(format!(
                "line {line}: {key} is documented, but a policy file may not set it"
            ));
        }
    }
    for key in &accepted {
        if !documented.contains_key(key) {
            problems.push(format!(
                "{key} is accepted in a policy file, but the reference does not list it"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{}:\n  {}",
        shown(&path),
        problems.join("\n  ")
    );
}

/// One ```` ```toml ```` block: where it is and its text.
struct Example {
    place: String,
    text: String,
}

fn toml_examples(path: &Path) -> Vec<Example> {
    let text = read(path);
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for line in lines(&text) {
        let trimmed = line.text.trim_start();
        match &mut current {
            None if trimmed.starts_with("```toml") => current = Some((line.number, String::new())),
            Some((start, body)) if trimmed.starts_with("```") => {
                out.push(Example {
                    place: format!("{}:{start}", shown(path)),
                    text: std::mem::take(body),
                });
                current = None;
            }
            Some((_, body)) => {
                body.push_str(line.text);
                body.push('\n');
            }
            None => {}
        }
    }
    assert!(
        current.is_none(),
        "{}: a ```toml block never ends",
        shown(path)
    );
    out
}

/// Whether the text has a `[name]` table header line.
fn has_header(text: &str, name: &str) -> bool {
    text.lines().any(|line| {
        let line = line.split('#').next().unwrap_or("").trim();
        line == format!("[{name}]")
    })
}

/// The policy `check-config` sees for an example: a complete one as written, a fragment
/// after the required sections it lacks. `Err` for a fragment that cannot be placed.
fn as_policy(example: &str) -> Result<String, String> {
    let (listener, upstream) = (
        has_header(example, "listener"),
        has_header(example, "upstream"),
    );
    if listener && upstream {
        return Ok(example.to_owned());
    }
    let first = example
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty() && !line.starts_with('#'));
    if !first.is_some_and(|line| line.starts_with('[')) {
        return Err(
            "a fragment must start with a table header, e.g. [limits], so it can be placed \
             after the [listener] and [upstream] of a minimal policy"
                .to_owned(),
        );
    }
    let mut policy = String::new();
    if !listener {
        policy.push_str(MINIMAL_LISTENER);
    }
    if !upstream {
        policy.push_str(MINIMAL_UPSTREAM);
    }
    policy.push_str(example);
    Ok(policy)
}

/// A CA certificate and its key, PEM: stands in for every certificate, key and CA a
/// policy names (a self-signed CA is its own chain and its own trust anchor).
struct Pem {
    cert: String,
    key: String,
}

fn generate_pem() -> Pem {
    let key = rcgen::KeyPair::generate().expect("a key");
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".to_owned()]).expect("certificate params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).expect("a self-signed certificate");
    Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

/// Writes the files a policy names (read as `check-config` reads paths: relative to the
/// policy's directory) so the check sees what a deployment would have.
fn create_named_files(policy: &str, dir: &Path, pem: &Pem) -> Result<(), String> {
    let Ok(config) = kpress_config::parse(policy, "example") else {
        return Ok(()); // check-config will say what is wrong
    };
    let mut files: Vec<(PathBuf, &str)> = Vec::new();
    if let Some(tls) = &config.listener.tls {
        files.push((tls.cert.clone(), &pem.cert));
        files.push((tls.key.clone(), &pem.key));
        files.extend(tls.client_ca.clone().map(|ca| (ca, pem.cert.as_str())));
    }
    if let Some(tls) = &config.upstream.tls {
        files.extend(tls.ca.clone().map(|ca| (ca, pem.cert.as_str())));
        if let Some((cert, key)) = &tls.client_cert {
            files.push((cert.clone(), &pem.cert));
            files.push((key.clone(), &pem.key));
        }
    }
    if let Some(sasl) = &config.upstream.sasl {
        if let kpress_config::PasswordSource::File(file) = &sasl.password {
            files.push((file.clone(), "a password\n"));
        }
    }
    match &config.upstream.oauthbearer {
        Some(kpress_config::BearerTokenSource::TokenFile(file)) => {
            files.push((file.clone(), "a.token.value\n"));
        }
        Some(kpress_config::BearerTokenSource::ClientCredentials {
            client_secret: kpress_config::PasswordSource::File(file),
            ..
        }) => files.push((file.clone(), "a client secret\n")),
        _ => {}
    }
    for (file, contents) in files {
        if file.is_absolute() {
            return Err(format!(
                "names the absolute path {}: examples use paths relative to the policy",
                file.display()
            ));
        }
        let file = dir.join(file);
        fs::create_dir_all(file.parent().expect("a parent")).expect("creating a directory");
        fs::write(&file, contents).expect("writing a named file");
    }
    Ok(())
}

/// Runs `kpress check-config` on `policy` in a directory of its own; `Err` with what it
/// printed when the policy is not usable.
fn check_config(policy: &str, dir: &Path, pem: &Pem) -> Result<(), String> {
    fs::create_dir_all(dir).expect("creating the example's directory");
    create_named_files(policy, dir, pem)?;
    let file = dir.join("policy.toml");
    fs::write(&file, policy).expect("writing the policy");
    let output = Command::new(KPRESS)
        .arg("check-config")
        // An example that warns teaches a setting that does nothing.
        .arg("--strict")
        .arg(&file)
        .env_remove("KPRESS_LOG")
        .env_remove("RUST_LOG")
        .output()
        .expect("running kpress check-config");
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "kpress check-config refused it:\n{}{}\n--- the policy checked ---\n{policy}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// The example policies of `config/`.
fn config_files() -> Vec<PathBuf> {
    let mut configs: Vec<PathBuf> = fs::read_dir(repo_root().join("config"))
        .expect("listing config/")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    configs.sort();
    assert!(configs.len() >= 5, "config/ holds only {configs:?}");
    configs
}

#[test]
fn toml_examples_and_config_files_pass_check_config() {
    let scratch = tempfile::tempdir().expect("a temp dir");
    let pem = generate_pem();
    let mut checked = 0;
    let mut failures = Vec::new();
    for path in markdown_files() {
        for example in toml_examples(&path) {
            let dir = scratch.path().join(format!("example-{checked}"));
            checked += 1;
            let result = as_policy(&example.text).and_then(|p| check_config(&p, &dir, &pem));
            if let Err(why) = result {
                failures.push(format!("{}: {why}", example.place));
            }
        }
    }
    assert!(
        checked >= 10,
        "only {checked} ```toml blocks found: is the extraction broken?"
    );
    for path in config_files() {
        let dir = scratch.path().join(path.file_stem().expect("a name"));
        if let Err(why) = check_config(&read(&path), &dir, &pem) {
            failures.push(format!("{}: {why}", shown(&path)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The keys a TOML text sets, as dotted paths from the root: `cert = ...` under
/// `[listener.tls]` is `listener.tls.cert`, `compression.type = ...` under `[[topics]]`
/// is `topics.compression.type`. Comments, and the lines of a multi-line array, set none.
fn keys_set(text: &str) -> BTreeSet<String> {
    let mut table = String::new();
    let mut keys = BTreeSet::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.starts_with('[') {
            table = line
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_owned();
        } else if let Some((key, _)) = line.split_once('=') {
            let key = key.trim();
            let bare = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
            if !key.is_empty() && key.chars().all(bare) {
                keys.insert(if table.is_empty() {
                    key.to_owned()
                } else {
                    format!("{table}.{key}")
                });
            }
        }
    }
    keys
}

#[test]
fn every_policy_key_has_an_example() {
    let mut shown_keys = BTreeSet::new();
    for path in markdown_files() {
        for example in toml_examples(&path) {
            shown_keys.extend(keys_set(&example.text));
        }
    }
    for path in config_files() {
        shown_keys.extend(keys_set(&read(&path)));
    }
    // `[defaults]` and `[[topics]]` take the same keys: an example in either shows one.
    let rule_key = |key: &str| {
        key.strip_prefix("defaults.")
            .or_else(|| key.strip_prefix("topics."))
            .map(str::to_owned)
    };
    let shown_rule_keys: BTreeSet<String> = shown_keys.iter().filter_map(|k| rule_key(k)).collect();
    let missing: Vec<String> = kpress_config::accepted_keys()
        .into_iter()
        .filter(|key| {
            !shown_keys.contains(key) && rule_key(key).is_none_or(|k| !shown_rule_keys.contains(&k))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "no ```toml example in README.md or docs/, and no config/*.toml, sets {}",
        missing.join(", ")
    );
}

/// Options (`--name`, `-c`) and arguments (`FILE`, `URL`) a `--help` lists, and for the
/// top level, its subcommands.
#[derive(Default)]
struct Help {
    commands: Vec<String>,
    options: Vec<String>,
    arguments: Vec<String>,
}

fn help(args: &[&str]) -> Help {
    let output = Command::new(KPRESS)
        .args(args)
        .arg("--help")
        .output()
        .expect("running kpress --help");
    assert!(output.status.success(), "kpress {args:?} --help failed");
    let text = String::from_utf8(output.stdout).expect("UTF-8 help");
    let mut help = Help::default();
    let mut part = "";
    for line in text.lines() {
        if !line.starts_with(' ') && line.ends_with(':') {
            part = line;
            continue;
        }
        // Commands and arguments are indented by 2 spaces, options by 2 (`-c, --config`)
        // or 6 (`    --format`), descriptions by 10 or more.
        let entry = line.trim_start();
        let indent = line.len() - entry.len();
        if entry.is_empty() || indent > 6 {
            continue;
        }
        let first = entry.split_whitespace().next().unwrap_or("");
        match part {
            "Commands:" if indent == 2 => help.commands.push(first.to_owned()),
            "Arguments:" if indent == 2 => help.arguments.push(
                first
                    .trim_matches(|c| c == '<' || c == '>' || c == '[' || c == ']' || c == '.')
                    .to_owned(),
            ),
            "Options:" => {
                for flag in entry.split(|c: char| c == ',' || c.is_whitespace()) {
                    if flag.starts_with('-') {
                        help.options.push(flag.to_owned());
                    }
                }
            }
            _ => {}
        }
    }
    help
}

/// Whether a backticked text of `section` starts with `name` as a whole word
/// (`` `--log FILTER` `` names `--log`, not `--log-format`).
fn names(section: &str, name: &str) -> bool {
    backticked(section).iter().any(|code| {
        code.strip_prefix(name).is_some_and(|rest| {
            rest.is_empty() || rest.starts_with(|c: char| c.is_whitespace() || "=.,".contains(c))
        })
    })
}

#[test]
fn cli_page_lists_every_subcommand_option_and_argument() {
    let path = repo_root().join("docs/cli.md");
    let text = read(&path);
    // The page's `## ` sections by heading.
    let mut sections: Vec<(String, String)> = Vec::new();
    for line in lines(&text) {
        if !line.in_code && line.text.starts_with("## ") {
            sections.push((line.text[3..].trim().to_owned(), String::new()));
        } else if let Some((_, body)) = sections.last_mut() {
            body.push_str(line.text);
            body.push('\n');
        }
    }
    let section = |heading: &str| {
        sections
            .iter()
            .find(|(h, _)| h == heading)
            .map(|(_, body)| body.as_str())
    };
    let mut problems = Vec::new();
    let top = help(&[]);
    assert!(top.commands.len() >= 7, "subcommands: {:?}", top.commands);
    let global = section("Global options").unwrap_or_else(|| panic!("no \"## Global options\""));
    for option in &top.options {
        if !names(global, option) {
            problems.push(format!("global option {option}: not in \"Global options\""));
        }
    }
    for command in &top.commands {
        if command == "help" {
            if !names(&text, "help") {
                problems.push("the help subcommand: not on the page".to_owned());
            }
            continue;
        }
        let heading = format!("`kpress {command}`");
        let Some(body) = section(&heading) else {
            problems.push(format!("{command}: no \"## {heading}\" section"));
            continue;
        };
        let sub = help(&[command]);
        for option in sub.options.iter().filter(|o| !top.options.contains(o)) {
            if !names(body, option) {
                problems.push(format!("{command} {option}: not in its section"));
            }
        }
        for argument in &sub.arguments {
            if !names(body, argument) {
                problems.push(format!("{command} argument {argument}: not in its section"));
            }
        }
    }
    for (heading, _) in &sections {
        if let Some(name) = heading
            .strip_prefix("`kpress ")
            .and_then(|h| h.strip_suffix('`'))
        {
            if !top.commands.iter().any(|c| c == name) {
                problems.push(format!("\"## {heading}\": kpress has no such subcommand"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{}:\n  {}",
        shown(&path),
        problems.join("\n  ")
    );
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(path: &Path) -> BTreeSet<String> {
    let text = read(path);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in lines(&text) {
        if !line.in_code && line.text.starts_with('#') {
            let base = anchor(line.text.trim_start_matches('#'));
            let n = seen.entry(base.clone()).or_insert(0);
            out.insert(if *n == 0 {
                base.clone()
            } else {
                format!("{base}-{n}")
            });
            *n += 1;
        }
    }
    out
}

#[test]
fn relative_links_reach_files_and_headings() {
    let mut problems = Vec::new();
    let mut links = 0;
    for path in markdown_files() {
        let text = read(&path);
        for line in lines(&text).iter().filter(|l| !l.in_code) {
            // Inline code may show link syntax without being a link.
            let prose: String = line.text.split('`').step_by(2).collect::<Vec<_>>().join("");
            for (_, rest) in prose.match_indices("](").map(|(i, _)| (i, &prose[i + 2..])) {
                let Some(target) = rest.split(')').next() else {
                    continue;
                };
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                links += 1;
                let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
                let dest = if file.is_empty() {
                    path.clone()
                } else {
                    path.parent().expect("a parent").join(file)
                };
                let place = format!("{}:{}", shown(&path), line.number);
                if !dest.exists() {
                    problems.push(format!("{place}: {target}: no such file"));
                } else if !fragment.is_empty()
                    && dest.extension().is_some_and(|e| e == "md")
                    && !anchors(&dest).contains(fragment)
                {
                    problems.push(format!("{place}: {target}: no such heading"));
                }
            }
        }
    }
    assert!(
        links > 50,
        "only {links} links found: is the extraction broken?"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// kpress-proxy's metrics files, one text: `crates/kpress-proxy/src/metrics.rs` and
/// every API slice's own `metrics.rs` below it.
fn metrics_source() -> String {
    let mut files = Vec::new();
    let mut stack = vec![repo_root().join("crates/kpress-proxy/src")];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("listing kpress-proxy/src") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.ends_with("metrics.rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    // A definition too long for one line goes on after its `=`: joined back into one.
    let mut source = String::new();
    for path in &files {
        for line in read(path).lines() {
            if source.ends_with(" =") {
                source.push(' ');
                source.push_str(line.trim());
            } else {
                source.push('\n');
                source.push_str(line);
            }
        }
    }
    source
}

/// The rest of a line defining a constant, `pub const …` or `pub(crate) const …`.
fn const_definition(line: &str) -> Option<&str> {
    let line = line.trim();
    line.strip_prefix("pub const ")
        .or_else(|| line.strip_prefix("pub(crate) const "))
}

/// The metric names kpress-proxy's metrics files define, where every name is defined
/// once as a `pub const NAME: &str = "kpress_…";` (or `pub(crate) const`).
fn defined_metrics() -> BTreeSet<String> {
    let source = metrics_source();
    let names: BTreeSet<String> = source
        .lines()
        .filter_map(const_definition)
        .filter_map(|rest| rest.split_once(": &str = \"kpress_"))
        .filter_map(|(_, name)| name.split_once('"'))
        .map(|(name, _)| format!("kpress_{name}"))
        .collect();
    assert!(names.len() > 30, "metrics.rs defines only {names:?}");
    names
}

/// The `kpress_*` metric names a Markdown text mentions in backticks (a name followed by
/// labels, `kpress_batches_total{outcome="grown"}`, counts); crate paths such as
/// `kpress_proxy=debug` and wildcards such as `kpress_shadow_*` do not.
fn mentioned_metrics(text: &str) -> BTreeSet<String> {
    let crates: Vec<String> = fs::read_dir(repo_root().join("crates"))
        .expect("listing crates/")
        .map(|entry| {
            entry
                .expect("an entry")
                .file_name()
                .to_string_lossy()
                .replace('-', "_")
        })
        .collect();
    let mut out = BTreeSet::new();
    for code in backticked(text) {
        for (at, _) in code.match_indices("kpress_") {
            if at > 0 && code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let name: String = code[at..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            let next = code[at + name.len()..].chars().next();
            let crate_path = crates.contains(&name) || next == Some(':') || next == Some('=');
            if !crate_path && next != Some('*') && !name.ends_with('_') {
                out.insert(name);
            }
        }
    }
    out
}

#[test]
fn metrics_in_the_docs_are_the_metrics_kpress_serves() {
    let defined = defined_metrics();
    let mut problems = Vec::new();
    for path in markdown_files() {
        for name in mentioned_metrics(&read(&path)) {
            if !defined.contains(&name) {
                problems.push(format!(
                    "{}: {name} is no metric kpress serves",
                    shown(&path)
                ));
            }
        }
    }
    let root = repo_root();
    let reference: BTreeSet<String> = ["docs/operations.md", "docs/shadow-trials.md"]
        .iter()
        .flat_map(|page| mentioned_metrics(&read(&root.join(page))))
        .collect();
    for name in defined.difference(&reference) {
        problems.push(format!(
            "{name} is served, but neither docs/operations.md nor docs/shadow-trials.md names it"
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A metric's type as `/metrics` declares it (`# TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MetricType {
    Counter,
    Gauge,
    Histogram,
}

/// The `[A, B]` of a `pub const NAME: [...] = [A, B];` in `source` (one line or several).
fn const_list<'a>(source: &'a str, name: &str) -> Vec<&'a str> {
    let start = source
        .find(&format!("pub const {name}:"))
        .unwrap_or_else(|| panic!("metrics.rs has no `pub const {name}`"));
    let body = &source[start..];
    let body = &body[body.find("= [").expect("a list") + 3..];
    let body = &body[..body.find("];").expect("the list's end")];
    body.split(',')
        .map(|item| item.trim().trim_start_matches('(').trim())
        .filter(|item| !item.is_empty())
        .collect()
}

/// The type `/metrics` declares for each metric kpress-proxy's metrics files define, read from where the code registers it: `counter!(NAME`, `gauge!(NAME` or
/// `histogram!(NAME` with the constant, a `by_pair(NAME)` (counters by codec pair),
/// the histograms' bucket table, and `FRACTIONAL_COUNTERS`, the gauges `/metrics`
/// serves as counters.
fn served_metric_types() -> BTreeMap<String, Vec<MetricType>> {
    let source = metrics_source();
    let consts: BTreeMap<&str, String> = source
        .lines()
        .filter_map(const_definition)
        .filter_map(|rest| rest.split_once(": &str = \"kpress_"))
        .filter_map(|(ident, name)| name.split_once('"').map(|(name, _)| (ident, name)))
        .map(|(ident, name)| (ident, format!("kpress_{name}")))
        .collect();
    let mut types: BTreeMap<String, Vec<MetricType>> = BTreeMap::new();
    let mut add = |ident: &str, kind: MetricType| {
        if let Some(name) = consts.get(ident) {
            let seen = types.entry(name.clone()).or_default();
            if !seen.contains(&kind) {
                seen.push(kind);
            }
        }
    };
    // Registrations may sit in other files of the crate too.
    let mut sources = vec![source.clone()];
    let src = repo_root().join("crates/kpress-proxy/src");
    let mut stack = vec![src];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("listing kpress-proxy/src") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("metrics.rs") {
                sources.push(read(&path));
            }
        }
    }
    for text in &sources {
        for (macro_name, kind) in [
            ("counter!(", MetricType::Counter),
            ("gauge!(", MetricType::Gauge),
            ("histogram!(", MetricType::Histogram),
            ("by_pair(", MetricType::Counter),
        ] {
            for (at, _) in text.match_indices(macro_name) {
                let args = text[at + macro_name.len()..].trim_start();
                let ident: String = args
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                add(&ident, kind);
            }
        }
    }
    for ident in const_list(&source, "HISTOGRAM_BUCKETS")
        .into_iter()
        .step_by(2)
    {
        add(ident, MetricType::Histogram);
    }
    for ident in const_list(&source, "FRACTIONAL_COUNTERS") {
        let name = consts
            .get(ident)
            .unwrap_or_else(|| panic!("FRACTIONAL_COUNTERS names {ident}, no metric"));
        let seen = types.entry(name.clone()).or_default();
        assert_eq!(
            seen.as_slice(),
            [MetricType::Gauge],
            "{name} is in FRACTIONAL_COUNTERS, so it must be registered as a gauge only"
        );
        *seen = vec![MetricType::Counter];
    }
    types
}

#[test]
fn every_metric_type_agrees_with_its_name() {
    let defined = defined_metrics();
    let types = served_metric_types();
    let mut problems = Vec::new();
    for name in &defined {
        let counter = name.ends_with("_total");
        match types.get(name).map(Vec::as_slice) {
            None | Some([]) => problems.push(format!(
                "{name}: registered nowhere as counter!, gauge! or histogram! of its constant"
            )),
            Some([kind]) => {
                if counter && *kind != MetricType::Counter {
                    problems.push(format!(
                        "{name} ends in _total but /metrics serves it as a {kind:?}: a \
                         _total is a counter (rate() over it must make sense)"
                    ));
                }
                if !counter && *kind == MetricType::Counter {
                    problems.push(format!(
                        "{name} is a counter, so its name must end in _total"
                    ));
                }
            }
            Some(kinds) => problems.push(format!("{name}: registered as {kinds:?}")),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The literal a default cell of the policy reference starts with, when the cell is
/// that literal alone or followed by a parenthesis (`` `"ports"` ``, `30000`,
/// `4194304 (4 MiB)`, `-1 (zlib's default, 6)`); `None` for prose (`bind`'s port + 100,
/// none, required, a conditional default).
fn literal_default(cell: &str) -> Option<String> {
    let head = match cell.find(" (") {
        Some(at) if cell.ends_with(')') => &cell[..at],
        _ => cell,
    };
    let value = head.trim().trim_matches('`').trim();
    let number = value.parse::<f64>().is_ok();
    let boolean = value == "true" || value == "false";
    let string = value.len() >= 2
        && value.starts_with('"')
        && value.ends_with('"')
        && !value[1..value.len() - 1].contains('"');
    (number || boolean || string).then(|| value.to_owned())
}

/// The policy reference's documented defaults: dotted key (`limits.max_frame_bytes`,
/// `defaults.compression.zstd.level`) to its default cell.
fn documented_defaults() -> BTreeMap<String, (usize, String)> {
    let text = read(&repo_root().join("docs/policy.md"));
    let mut out = BTreeMap::new();
    for table in tables(&text)
        .iter()
        .filter(|t| t.header.first().is_some_and(|h| h == "key"))
    {
        let Some(column) = table.header.iter().position(|h| h == "default") else {
            continue;
        };
        for (line, row) in &table.rows {
            let Some(cell) = row.get(column) else {
                continue;
            };
            for key in backticked(&row[0]) {
                for section in sections_named(&table.heading) {
                    out.insert(format!("{section}.{key}"), (*line, cell.clone()));
                }
            }
        }
    }
    out
}

/// A policy whose last table is `key`'s, with what that table needs to be valid;
/// `key = value` appended at its end when given. `None` for a section no base is
/// known for.
fn policy_setting_key(key: &str, value: Option<&str>) -> Option<String> {
    let listener = "[listener]\nbind = \"127.0.0.1:19092\"\n";
    let upstream = "[upstream]\nbootstrap_servers = [\"127.0.0.1:9092\"]\n";
    let (section, leaf) = key.split_once('.')?;
    let (table, leaf) = match section {
        "listener" | "upstream" => match leaf.split_once('.') {
            Some((sub @ ("tls" | "sasl"), rest)) => (format!("{section}.{sub}"), rest),
            _ => (section.to_owned(), leaf),
        },
        _ => (section.to_owned(), leaf),
    };
    let mut text = String::new();
    if table != "listener" {
        text.push_str(listener);
    }
    if table != "upstream" {
        text.push_str(upstream);
    }
    let base = match table.as_str() {
        "listener" => listener.to_owned(),
        "upstream" => upstream.to_owned(),
        "listener.tls" => "[listener.tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\n".to_owned(),
        "upstream.tls" => "[upstream.tls]\n".to_owned(),
        "upstream.sasl" => "[upstream.sasl]\nmechanism = \"PLAIN\"\nusername = \"u\"\n\
                            password_env = \"P\"\n"
            .to_owned(),
        "limits" | "log" => format!("[{table}]\n"),
        // Its other keys are read only with adaptive levels on (else warned about).
        "overload" if leaf != "adaptive" => "[overload]\nadaptive = true\n".to_owned(),
        "overload" => "[overload]\n".to_owned(),
        "admin" => "[admin]\nbind = \"127.0.0.1:9464\"\n".to_owned(),
        "shadow" => "[shadow]\ncandidates = [\"zstd:3\"]\n".to_owned(),
        "consumers" => "[consumers]\n".to_owned(),
        "autopilot" => "[autopilot]\n".to_owned(),
        "clients" => "[[clients]]\nmatch = \"c\"\naccept = []\n".to_owned(),
        "defaults" | "topics" => {
            let header = if table == "topics" {
                "[[topics]]\nmatch = \"t\"\n"
            } else {
                "[defaults]\n"
            };
            let codec_of = |rest: &str| {
                ["gzip", "snappy", "lz4", "zstd"]
                    .into_iter()
                    .find(|codec| rest.starts_with(&format!("{codec}.")))
            };
            let mut rule = header.to_owned();
            if let Some(rest) = leaf
                .strip_prefix("overload.compression.")
                .filter(|rest| *rest != "type")
            {
                let codec = codec_of(rest).unwrap_or("zstd");
                rule.push_str(&format!(
                    "compression.type = \"{codec}\"\noverload.compression.type = \"{codec}\"\n"
                ));
            } else if leaf.starts_with("auto.") {
                rule.push_str("compression.type = \"auto\"\n");
            } else if leaf != "compression.type" && leaf != "match" {
                let codec = leaf
                    .strip_prefix("compression.")
                    .and_then(codec_of)
                    .unwrap_or("zstd");
                rule.push_str(&format!("compression.type = \"{codec}\"\n"));
            }
            rule
        }
        _ => return None,
    };
    text.push_str(&base);
    if let Some(value) = value {
        text.push_str(&format!("{leaf} = {value}\n"));
    }
    Some(text)
}

/// Every default the policy reference gives as a literal is what kpress uses when the
/// key is left out: a policy setting the key to it parses to the same settings as one
/// that does not set it.
#[test]
fn documented_defaults_are_the_codes_defaults() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for (key, (line, cell)) in documented_defaults() {
        let Some(value) = literal_default(&cell) else {
            continue;
        };
        let (Some(without), Some(with)) = (
            policy_setting_key(&key, None),
            policy_setting_key(&key, Some(&value)),
        ) else {
            problems.push(format!("line {line}: {key}: no policy to try it in"));
            continue;
        };
        let parsed = |text: &str| {
            kpress_config::parse(text, "policy")
                .map(|mut config| {
                    // Where each key was written, not what it sets.
                    config.restart_keys = Default::default();
                    // The unnamed provider is zlib (kpress-deflate's registry resolves it
                    // so); named, it is `Named(Zlib)`.
                    format!("{config:?}")
                        .replace("Named(Zlib)", "Default")
                        // No level written is the default level, info (logging.rs).
                        .replace(
                            "LogSettings { level: Some(\"info\") }",
                            "LogSettings { level: None }",
                        )
                })
                .map_err(|err| format!("{err}"))
        };
        checked += 1;
        match (parsed(&without), parsed(&with)) {
            (Ok(without), Ok(with)) if without == with => {}
            (Ok(without), Ok(with)) => {
                let at = without
                    .bytes()
                    .zip(with.bytes())
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                let around = |s: &str| s[at.saturating_sub(80)..(at + 80).min(s.len())].to_owned();
                problems.push(format!(
                    "docs/policy.md:{line}: {key}: documented default {value} is not kpress's \
                     (setting it changes the parsed policy: {} against {})",
                    around(&without),
                    around(&with)
                ))
            }
            (Err(err), _) | (_, Err(err)) => problems.push(format!(
                "docs/policy.md:{line}: {key} = {value}: {err}\n--- policy ---\n{with}"
            )),
        }
    }
    assert!(checked > 40, "only {checked} literal defaults checked");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A number with an optional unit (`500 ms`, `30 s`, `4 MiB`) in the unit of `key`
/// (milliseconds for `*_ms`, seconds for `*_secs`, else bytes or a plain count).
fn in_key_units(key: &str, number: f64, unit: &str) -> Option<f64> {
    let factor = match (unit, key) {
        ("", _) => 1.0,
        ("ms", k) if k.ends_with("_ms") => 1.0,
        ("s", k) if k.ends_with("_ms") => 1000.0,
        ("s", k) if k.ends_with("_secs") => 1.0,
        ("KiB", _) => 1024.0,
        ("MiB", _) => 1048576.0,
        ("GiB", _) => 1073741824.0,
        _ => return None,
    };
    Some(number * factor)
}

/// Where prose quotes a policy key's default in the book's form: a key in backticks
/// (`` `[limits] max_rewrite_wait_ms` ``, `` `readiness_window_secs` ``, a link
/// `` [`topic_config_refresh_ms`](…) ``) followed by `(default VALUE[ UNIT]` or
/// `(VALUE[ UNIT] by default`, or a ```` ```toml ```` line `key = …  # … default VALUE`.
/// Yields (key as written, the table it names if any, value, unit).
fn quoted_defaults(line: &str) -> Vec<(String, Option<String>, String, String)> {
    let mut out = Vec::new();
    let parts: Vec<&str> = line.split('`').collect();
    for i in (1..parts.len()).step_by(2) {
        let code = parts[i].trim();
        let (table, key) = match code.strip_prefix('[').and_then(|c| c.split_once("] ")) {
            Some((table, key)) => (Some(table.to_owned()), key),
            None => (None, code),
        };
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_lowercase() || "_.".contains(c))
        {
            continue;
        }
        let mut after = parts.get(i + 1).copied().unwrap_or("");
        if let Some(rest) = after.strip_prefix("](") {
            after = rest.split_once(')').map_or("", |(_, rest)| rest);
        }
        let Some(inside) = after.trim_start().strip_prefix('(') else {
            continue;
        };
        let inside = inside.split([')', ',', ';']).next().unwrap_or("");
        let words: Vec<&str> = inside.split_whitespace().collect();
        let (value, unit) = match words.as_slice() {
            ["default", value] => (*value, ""),
            ["default", value, unit] => (*value, *unit),
            [value, "by", "default"] => (*value, ""),
            [value, unit, "by", "default"] => (*value, *unit),
            _ => continue,
        };
        out.push((key.to_owned(), table, value.to_owned(), unit.to_owned()));
    }
    out
}

/// Prose that quotes a policy key's default quotes the policy reference's (which the
/// test above holds to the code's).
#[test]
fn defaults_quoted_in_prose_are_the_references() {
    let documented = documented_defaults();
    let resolve = |key: &str, table: Option<&str>| -> Option<String> {
        match table {
            Some(table) => Some(format!("{table}.{key}")).filter(|k| documented.contains_key(k)),
            None => {
                let found: BTreeSet<&String> = documented
                    .keys()
                    .filter(|k| k.ends_with(&format!(".{key}")))
                    .filter(|k| !k.starts_with("topics."))
                    .collect();
                (found.len() == 1).then(|| found.into_iter().next().unwrap().clone())
            }
        }
    };
    let number = |text: &str| text.trim_matches('`').replace(',', "").parse::<f64>().ok();
    let mut problems = Vec::new();
    let mut checked = 0;
    for path in markdown_files() {
        let text = read(&path);
        // (first line, text): prose paragraphs joined into one line each (a key may end
        // one line and its default start the next), table rows and code lines as they are.
        let mut pieces: Vec<(usize, String, bool)> = Vec::new();
        let mut paragraph: Option<(usize, String)> = None;
        for line in lines(&text) {
            let row = line.text.trim_start().starts_with('|');
            if line.in_code || row || line.text.trim().is_empty() {
                if let Some((start, joined)) = paragraph.take() {
                    pieces.push((start, joined, false));
                }
                if !line.text.trim().is_empty() {
                    pieces.push((line.number, line.text.to_owned(), line.in_code));
                }
            } else {
                match &mut paragraph {
                    Some((_, joined)) => {
                        joined.push(' ');
                        joined.push_str(line.text.trim());
                    }
                    None => paragraph = Some((line.number, line.text.trim().to_owned())),
                }
            }
        }
        if let Some((start, joined)) = paragraph.take() {
            pieces.push((start, joined, false));
        }
        let mut toml_table: Option<String> = None;
        for (at_line, text, in_code) in pieces {
            let mut quoted = Vec::new();
            if in_code {
                let setting = text.split('#').next().unwrap_or("").trim();
                if setting.starts_with('[') && !setting.starts_with("[[") {
                    toml_table = Some(setting.trim_matches(|c| c == '[' || c == ']').to_owned());
                } else if let Some((setting, comment)) = text.trim().split_once('#') {
                    let key = setting.split('=').next().unwrap_or("").trim();
                    if let Some(at) = comment.find("default ") {
                        let words: Vec<&str> = comment[at + 8..]
                            .split([')', ',', ';'])
                            .next()
                            .unwrap_or("")
                            .split_whitespace()
                            .collect();
                        if let (false, [value, rest @ ..]) = (key.is_empty(), words.as_slice()) {
                            quoted.push((
                                key.to_owned(),
                                toml_table.clone(),
                                value.to_string(),
                                rest.first().copied().unwrap_or("").to_owned(),
                            ));
                        }
                    }
                }
            } else {
                toml_table = None;
                quoted = quoted_defaults(&text);
            }
            for (key, table, value, unit) in quoted {
                let Some(full) = resolve(&key, table.as_deref()) else {
                    continue;
                };
                let (_, cell) = &documented[&full];
                let Some(reference) = literal_default(cell) else {
                    continue;
                };
                checked += 1;
                let same = match (number(&value), number(&reference)) {
                    (Some(quoted), Some(reference)) => {
                        in_key_units(&full, quoted, &unit) == Some(reference)
                    }
                    _ => value.trim_matches('`') == reference,
                };
                if !same {
                    problems.push(format!(
                        "{}:{at_line}: {key}: default {} quoted, the policy reference \
                         says {reference}",
                        shown(&path),
                        format!("{value} {unit}").trim_end(),
                    ));
                }
            }
        }
    }
    assert!(checked >= 5, "only {checked} quoted defaults found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The environment variables a source text reads: in a file that reads the environment
/// (`env::var`, `var_os`, `from_env`, clap's `env = "…"`), every string literal outside its test module
/// shaped like a variable name (`AWS_ROLE_ARN`, `KPRESS_LOG`).
fn variables_read(source: &str) -> BTreeSet<String> {
    // `env = "…"`: a clap argument that falls back to a variable.
    let reads = ["env::var", "var_os(", "from_env(", "env = \""];
    if !reads.iter().any(|r| source.contains(r)) {
        return BTreeSet::new();
    }
    let mut code = source.split("#[cfg(test)]").next().unwrap_or("").to_owned();
    // `env!` and `option_env!` read the build's environment, not kpress's.
    while let Some(at) = code.find("env!(\"") {
        let end = code[at + 6..]
            .find('"')
            .map_or(code.len(), |e| at + 6 + e + 1);
        code.replace_range(at..end, "");
    }
    let shaped = |s: &str| {
        s.len() > 3
            && s.starts_with(|c: char| c.is_ascii_uppercase())
            && s.contains('_')
            && s.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    };
    code.split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| shaped(s))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_environment_variable_read_is_in_the_book() {
    let mut read_by: BTreeMap<String, String> = BTreeMap::new();
    let crates = repo_root().join("crates");
    let mut stack = vec![crates];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("listing a directory") {
            let path = entry.expect("an entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                // Sources only: tests, benches and build output read what harnesses set.
                if !["tests", "benches", "target", "fuzz", "examples"].contains(&name) {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs")
                && path.components().any(|c| c.as_os_str() == "src")
            {
                for variable in variables_read(&read(&path)) {
                    read_by.entry(variable).or_insert_with(|| shown(&path));
                }
            }
        }
    }
    assert!(
        read_by.contains_key("KPRESS_LOG") && read_by.contains_key("AWS_ROLE_ARN"),
        "variables found: {read_by:?}"
    );
    let book: BTreeSet<String> = markdown_files()
        .iter()
        .flat_map(|path| {
            backticked(&read(path))
                .into_iter()
                .flat_map(|code| {
                    code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .map(str::to_owned)
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let missing: Vec<String> = read_by
        .iter()
        .filter(|(variable, _)| !book.contains(*variable))
        .map(|(variable, file)| format!("{variable} (read in {file})"))
        .collect();
    assert!(
        missing.is_empty(),
        "kpress reads these environment variables, but no page of the book names them in \
         backticks: {}",
        missing.join(", ")
    );
}
