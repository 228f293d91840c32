//! The autopilot's metrics (`compression.type = "auto"`).

/// 1 for the candidate each auto topic gets now, 0 for the ones it had before,
/// labelled `topic` and `candidate` (a spec such as `zstd:3`, or [`AS_SENT`]).
/// Undecided topics have no series at 1.
pub const AUTOPILOT_CHOICE: &str = "kpress_autopilot_choice";
/// Changes of an auto topic's choice in this process (its own decisions and choices
/// adopted from the fleet), labelled `topic`.
pub const AUTOPILOT_CHANGES: &str = "kpress_autopilot_changes_total";
/// The CPU budget of an auto rule's topics in cores (for the fleet: the rule's budget
/// times the replicas merged), labelled `rule`; absent for rules without a budget.
pub const AUTOPILOT_BUDGET_CORES: &str = "kpress_autopilot_budget_cores";
/// The cores an auto rule's topics are predicted to take under their choices, at the
/// traffic of the figures decided on, labelled `rule`.
pub const AUTOPILOT_BUDGET_USED_CORES: &str = "kpress_autopilot_budget_used_cores";
/// 1 while this process decides with the fleet through `[autopilot] topic`, 0 while
/// it decides alone.
pub const AUTOPILOT_SHARED: &str = "kpress_autopilot_shared";
/// Replicas whose figures the last decision merged (this one included; 1 alone).
pub const AUTOPILOT_REPLICAS: &str = "kpress_autopilot_replicas";
/// Batches of auto topics left out of the decision window's figures because the
/// window already tracked `[limits] max_topic_labels` topics.
pub const AUTOPILOT_UNTRACKED_BATCHES: &str = "kpress_autopilot_untracked_batches_total";

/// The `candidate` label of a topic left as the producer sent it (the label the
/// rules read as such).
pub const AS_SENT: &str = kpress_config::AUTO_AS_SENT;

pub(crate) fn choice(topic: &str, candidate: &str, chosen: bool) {
    metrics::gauge!(AUTOPILOT_CHOICE, "topic" => topic.to_owned(), "candidate" => candidate.to_owned())
        .set(f64::from(u8::from(chosen)));
}

pub(crate) fn change(topic: &str) {
    metrics::counter!(AUTOPILOT_CHANGES, "topic" => topic.to_owned()).increment(1);
}

pub(crate) fn budget(rule: &str, limit: Option<f64>, used: f64) {
    if let Some(limit) = limit {
        metrics::gauge!(AUTOPILOT_BUDGET_CORES, "rule" => rule.to_owned()).set(limit);
    }
    metrics::gauge!(AUTOPILOT_BUDGET_USED_CORES, "rule" => rule.to_owned()).set(used);
}

pub(crate) fn fleet(shared: bool, replicas: usize) {
    metrics::gauge!(AUTOPILOT_SHARED).set(f64::from(u8::from(shared)));
    metrics::gauge!(AUTOPILOT_REPLICAS).set(replicas as f64);
}

pub(crate) fn untracked_batches(batches: u64) {
    metrics::counter!(AUTOPILOT_UNTRACKED_BATCHES).increment(batches);
}
