//! The policy in force, re-read on every reload trigger (SIGHUP, a change to the file):
//! checked exactly as `check-config` checks it, then swapped in whole. Only
//! `kpress_config::LIVE_SECTIONS` (the rules, `[log]`, `[shadow]`, `[overload]`) change
//! live; every other section is fixed at start, so each key changed there is logged
//! with its place as taking effect on restart and ignored, never half-applied.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kpress_config::{AutoChoiceSource, Config, PolicySet, Problem, TopicConfigSource};
use kpress_proxy::{Autopilot, ClusterConnector, PolicySnapshot, ShadowTrials};
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::check_config;

/// A policy file as applied.
#[derive(Debug)]
pub(crate) struct AppliedPolicy {
    pub(crate) path: PathBuf,
    /// What kpress runs with: the sections fixed at start, the rules of the file.
    pub(crate) config: Config,
    /// The rules compiled, as the proxy runs them: their levels in force live here.
    pub(crate) rules: Arc<PolicySet>,
    /// Where the rules' topic mode learns topics' configurations, kept for reloads;
    /// `None`: topic-mode topics pass as sent.
    pub(crate) topic_configs: Option<Arc<dyn TopicConfigSource>>,
    /// Where auto rules' choices come from, kept for reloads (one per process); `None`:
    /// auto topics stay undecided.
    pub(crate) autopilot: Option<Arc<Autopilot>>,
    /// SHA-256 of the file's bytes, hex.
    pub(crate) file_hash: String,
    pub(crate) loaded_at: SystemTime,
}

impl AppliedPolicy {
    /// The policy read at start.
    pub(crate) fn at_start(
        path: &Path,
        config: Config,
        topic_configs: Option<Arc<dyn TopicConfigSource>>,
        autopilot: Option<Arc<Autopilot>>,
    ) -> AppliedPolicy {
        AppliedPolicy {
            path: path.to_owned(),
            file_hash: std::fs::read(path)
                .map_or_else(|_| String::new(), |bytes| hex_sha256(&bytes)),
            rules: Arc::new(compile(&config, topic_configs.as_ref(), autopilot.as_ref())),
            topic_configs,
            autopilot,
            config,
            loaded_at: SystemTime::now(),
        }
    }
}

/// `config`'s rules, resolving topic mode from `topic_configs` and auto rules'
/// choices from `autopilot` when given.
fn compile(
    config: &Config,
    topic_configs: Option<&Arc<dyn TopicConfigSource>>,
    autopilot: Option<&Arc<Autopilot>>,
) -> PolicySet {
    PolicySet::with_sources(
        config,
        topic_configs.cloned(),
        autopilot.map(|a| Arc::clone(a) as Arc<dyn AutoChoiceSource>),
    )
}

fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What the proxy runs `applied` under: its rules, and its shadow trials (`running`'s
/// kept when `[shadow]` and the limits are the same, so a reload of the rules alone
/// leaves the trial threads running).
pub(crate) fn snapshot(
    applied: &AppliedPolicy,
    running: Option<&PolicySnapshot>,
) -> PolicySnapshot {
    let config = &applied.config;
    PolicySnapshot {
        rules: Arc::clone(&applied.rules) as Arc<dyn kpress_batch::PolicyLookup>,
        shadow: ShadowTrials::follow_feeding(
            running.and_then(|running| running.shadow.as_ref()),
            config.trial_settings().as_ref(),
            &config.limits,
            applied.autopilot.as_ref().map(|a| a.collector()),
        ),
        consumers: Arc::new(config.consumers.clone()),
    }
}

/// Ends `[overload]` evaluation windows of the rules in force, one every `window_ms`:
/// each level change is logged, and every rule's level in force is published in
/// `kpress_overload_level`. A reload's rules start at their configured levels, with
/// windows of their own.
pub(crate) fn spawn_overload_windows(mut applied: watch::Receiver<Arc<AppliedPolicy>>) {
    tokio::spawn(async move {
        loop {
            let current = Arc::clone(&applied.borrow_and_update());
            let rules = &current.rules;
            publish_levels(rules);
            let window = Duration::from_millis(rules.overload_settings().window_ms);
            let mut windows =
                tokio::time::interval_at(tokio::time::Instant::now() + window, window);
            windows.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    changed = applied.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        break;
                    }
                    _ = windows.tick() => {
                        for change in rules.end_window() {
                            tracing::info!(
                                rule = %change.rule,
                                codec = change.codec.name(),
                                from = change.from,
                                to = change.to,
                                why = %change.reason,
                                "overload: level {} of rule {} now {} (was {})",
                                change.codec.name(),
                                change.rule,
                                change.to,
                                change.from,
                            );
                        }
                        publish_levels(rules);
                    }
                }
            }
        }
    });
}

/// Runs the autopilot's decision windows, one every `[autopilot] window_ms` (the first
/// at once, so a process that starts takes the fleet's stored choices before its first
/// trial), on the rules in force at each; the fleet topic is reached through
/// `connector`'s side connections.
pub(crate) fn spawn_autopilot(
    autopilot: Arc<Autopilot>,
    connector: Option<ClusterConnector>,
    applied: watch::Receiver<Arc<AppliedPolicy>>,
) {
    tokio::spawn(async move {
        let mut fleet = autopilot.fleet(connector);
        let window = autopilot.window_length();
        let mut windows = tokio::time::interval(window);
        windows.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            windows.tick().await;
            let current = Arc::clone(&applied.borrow());
            autopilot
                .window(&mut fleet, &current.config, &current.rules)
                .await;
        }
    });
}

fn publish_levels(rules: &PolicySet) {
    for level in rules.levels() {
        kpress_proxy::metrics::overload_level(&level.rule, level.codec.name(), level.effective);
    }
}

/// Re-reads the policy on every change of `reload`; sends each applied policy's
/// snapshot on `snapshots` (the proxy's) and returns the receiver of the applied
/// policies (the admin endpoint's).
pub(crate) fn spawn(
    applied: AppliedPolicy,
    mut reload: watch::Receiver<u64>,
    snapshots: watch::Sender<PolicySnapshot>,
) -> watch::Receiver<Arc<AppliedPolicy>> {
    record_loaded(&applied);
    let (applied_tx, applied_rx) = watch::channel(Arc::new(applied));
    tokio::spawn(async move {
        while reload.changed().await.is_ok() {
            let current = Arc::clone(&applied_tx.borrow());
            let path = current.path.clone();
            // check-config's work reads files and may probe gzip providers: off the reactor.
            let outcome = tokio::task::spawn_blocking(move || reread(&current))
                .await
                .unwrap_or_else(|err| Reread::Invalid(vec![format!("reload task failed: {err}")]));
            match outcome {
                Reread::Unchanged => {
                    kpress_proxy::metrics::policy_reload("unchanged");
                }
                Reread::Invalid(lines) => {
                    kpress_proxy::metrics::policy_reload("invalid");
                    tracing::error!(
                        file = %path.display(),
                        problems = %lines.join("\n"),
                        "policy not reloaded: keeping the policy in force"
                    );
                }
                Reread::Applied {
                    policy,
                    restart,
                    changes,
                } => {
                    for warning in &policy.config.warnings {
                        tracing::warn!("{warning}");
                    }
                    for change in &changes {
                        tracing::warn!("{change}");
                    }
                    crate::logging::apply_policy_level(policy.config.log.level);
                    let next = snapshot(&policy, Some(&snapshots.borrow()));
                    let result = if restart.is_empty() {
                        tracing::info!(
                            file = %path.display(),
                            hash = %policy.file_hash,
                            "policy reloaded:\n{}",
                            check_config::summary(&policy.config).trim_end()
                        );
                        "applied"
                    } else {
                        tracing::warn!(
                            file = %path.display(),
                            needs_restart = %restart.join(", "),
                            "policy rules reloaded; these changes need a restart and were not applied"
                        );
                        "restart_needed"
                    };
                    kpress_proxy::metrics::policy_reload(result);
                    record_loaded(&policy);
                    // Replaced trials end once the requests sampled for them are done.
                    let _ = snapshots.send(next);
                    let _ = applied_tx.send(Arc::from(policy));
                }
            }
        }
    });
    applied_rx
}

fn record_loaded(policy: &AppliedPolicy) {
    let seconds = policy
        .loaded_at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    kpress_proxy::metrics::policy_loaded(seconds);
}

enum Reread {
    Unchanged,
    Invalid(Vec<String>),
    Applied {
        policy: Box<AppliedPolicy>,
        /// The sections that changed but apply only at start.
        restart: Vec<&'static str>,
        /// Each key of those sections the file changed, located in it.
        changes: Vec<Problem>,
    },
}

fn reread(current: &AppliedPolicy) -> Reread {
    let bytes = match std::fs::read(&current.path) {
        Ok(bytes) => bytes,
        Err(err) => {
            return Reread::Invalid(vec![format!(
                "kpress: cannot read {}: {err}",
                current.path.display()
            )])
        }
    };
    let file_hash = hex_sha256(&bytes);
    if file_hash == current.file_hash {
        return Reread::Unchanged;
    }
    let new = match check_config::load_checked(&current.path) {
        Ok(config) => config,
        Err((_, lines)) => return Reread::Invalid(lines),
    };
    let changes = new.restart_changes(&current.config);
    let (config, restart) = merge_live(&current.config, new);
    Reread::Applied {
        policy: Box::new(AppliedPolicy {
            path: current.path.clone(),
            rules: Arc::new(compile(
                &config,
                current.topic_configs.as_ref(),
                current.autopilot.as_ref(),
            )),
            topic_configs: current.topic_configs.clone(),
            autopilot: current.autopilot.clone(),
            config,
            file_hash,
            loaded_at: SystemTime::now(),
        }),
        restart,
        changes,
    }
}

/// `running` with `new`'s rules; the sections of `new` that differ from `running` and
/// cannot change live are named, and `running`'s kept (with the keys as `running`
/// wrote them, so the next reload is compared with what is in force).
fn merge_live(running: &Config, new: Config) -> (Config, Vec<&'static str>) {
    let mut restart = Vec::new();
    if new.listener != running.listener {
        restart.push("[listener]");
    }
    if new.upstream != running.upstream {
        restart.push("[upstream]");
    }
    if new.limits != running.limits {
        restart.push("[limits]");
    }
    if new.admin != running.admin {
        restart.push("[admin]");
    }
    if new.autopilot != running.autopilot {
        restart.push("[autopilot]");
    }
    let config = Config {
        defaults: new.defaults,
        topics: new.topics,
        log: new.log,
        shadow: new.shadow,
        overload: new.overload,
        warnings: new.warnings,
        ..running.clone()
    };
    (config, restart)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> Config {
        crate::test_policy::with(extra)
    }

    #[test]
    fn rules_apply_live_and_other_sections_wait_for_a_restart() {
        let running = config("[[topics]]\nmatch = \"a\"\ncompression.type = \"lz4\"\n");
        let new = config(
            "[limits]\nmax_connections = 5\n[[topics]]\nmatch = \"a\"\ncompression.type = \"zstd\"\n",
        );
        let (merged, restart) = merge_live(&running, new.clone());
        assert_eq!(restart, vec!["[limits]"]);
        assert_eq!(merged.shadow, None);
        assert_eq!(merged.limits, running.limits);
        assert_eq!(merged.topics.len(), 1);
        assert_eq!(merged.topics[0].policy, new.topics[0].policy);
        let (_, restart) = merge_live(&running, running.clone());
        assert!(restart.is_empty());
    }

    #[test]
    fn each_restart_key_a_reload_changes_is_named_until_a_restart() {
        let running = config("[limits]\nmax_rewrite_wait_ms = 500\n");
        let new = config("[limits]\nmax_rewrite_wait_ms = 200\n[overload]\nadaptive = true\n");
        let changes: Vec<String> = new
            .restart_changes(&running)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            changes,
            [
                "k.toml:7:23: limits.max_rewrite_wait_ms = 200: changed (running: 500): takes \
              effect on restart; until then the running value stays in force"
            ]
        );
        let (merged, restart) = merge_live(&running, new.clone());
        assert_eq!(restart, ["[limits]"]);
        assert_eq!(merged.limits.max_rewrite_wait_ms, 500);
        assert!(merged.overload.adaptive);
        // The next reload is compared with what is in force, not with the last file.
        assert_eq!(new.restart_changes(&merged).len(), 1);
        assert!(running.restart_changes(&merged).is_empty());
    }

    #[test]
    fn a_reload_of_the_rules_alone_keeps_the_running_trials() {
        let shadow = "[shadow]\ncandidates = [\"zstd:3\"]\n";
        let running = config(shadow);
        let at = |config: &Config| {
            AppliedPolicy::at_start(Path::new("/nonexistent"), config.clone(), None, None)
        };
        let first = snapshot(&at(&running), None);
        let started = first.shadow.as_ref().expect("trials started");
        let rules_changed = config(&format!(
            "{shadow}[[topics]]\nmatch = \"a\"\ncompression.type = \"lz4\"\n"
        ));
        let (merged, _) = merge_live(&running, rules_changed);
        let second = snapshot(&at(&merged), Some(&first));
        assert!(!Arc::ptr_eq(&first.rules, &second.rules));
        assert!(ShadowTrials::ptr_eq(
            started,
            second.shadow.as_ref().unwrap()
        ));
        // Another [shadow] starts other trials; none stops them.
        let (merged, _) = merge_live(&merged, config("[shadow]\ncandidates = [\"lz4:9\"]\n"));
        let third = snapshot(&at(&merged), Some(&second));
        assert!(!ShadowTrials::ptr_eq(
            started,
            third.shadow.as_ref().unwrap()
        ));
        let (merged, _) = merge_live(&merged, config(""));
        assert!(snapshot(&at(&merged), Some(&third)).shadow.is_none());
        // An auto rule runs the trials it needs without a [shadow].
        let (merged, _) = merge_live(&merged, config("[defaults]\ncompression.type = \"auto\"\n"));
        assert!(snapshot(&at(&merged), Some(&third)).shadow.is_some());
    }

    #[test]
    fn autopilot_waits_for_a_restart() {
        let running = config("");
        let new = config("[autopilot]\nwindow_ms = 1000\n");
        let (merged, restart) = merge_live(&running, new);
        assert_eq!(restart, ["[autopilot]"]);
        assert_eq!(merged.autopilot, running.autopilot);
    }

    #[test]
    fn shadow_trials_change_live() {
        let running = config("");
        let new = config("[shadow]\ncandidates = [\"zstd:3\"]\n");
        let (merged, restart) = merge_live(&running, new.clone());
        assert!(restart.is_empty(), "{restart:?}");
        assert_eq!(merged.shadow, new.shadow);
        let (merged, restart) = merge_live(&new, running.clone());
        assert!(restart.is_empty(), "{restart:?}");
        assert_eq!(merged.shadow, None);
    }
}
