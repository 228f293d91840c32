//! The choice of a codec per topic: objective, eligibility, stability, CPU budget.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::figures::{decay_factor, pair_key, CandidateFigures, TopicFigures};

/// The half-life of trial figures, in decision windows: 5 windows (5 minutes at the
/// default 60 s window) keeps about 7 windows' worth of samples in the statistics
/// (`1 / (1 - 0.5^(1/5))` = 7.7) and lets a payload change take over the figures
/// within a few half-lives (see the crate docs).
pub const DECAY_HALF_LIFE_WINDOWS_DEFAULT: f64 = 5.0;

/// The most combinations of per-topic options the budget search tries exhaustively;
/// beyond, or beyond [`EXACT_SEARCH_TOPICS_MAX`] topics, it upgrades greedily.
pub const EXACT_SEARCH_MAX: u64 = 20_000;
/// The most topics the exhaustive search takes (its recursion is one level a topic).
pub const EXACT_SEARCH_TOPICS_MAX: usize = 32;

const HOUR_MS: u64 = 3_600_000;
const BYTES_PER_GB: f64 = 1e9;
const SECONDS_PER_HOUR: f64 = 3600.0;

/// Prices of the `cost` objective, in any one currency.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Prices {
    /// Per GB (10^9 bytes) written to the broker's storage.
    pub stored_per_gb: f64,
    /// Per GB moved over the network.
    pub moved_per_gb: f64,
    /// Per core-hour of rewrite CPU.
    pub core_hour: f64,
}

/// What a choice minimizes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Objective {
    /// Expected stored bytes per second: `ratio × traffic`, where `ratio` is the
    /// candidate's `bytes_out / bytes_in` and `traffic` the topic's bytes per second
    /// as sent (`traffic_bytes / span_ms × 1000`).
    Bytes,
    /// Money per second of traffic:
    /// `(stored_per_gb + moved_per_gb) × ratio × traffic / 10^9 + core_hour × cores / 3600`,
    /// where `cores = traffic × cpu_nanos / bytes_in / 10^9` (the candidate's CPU per
    /// byte as sent, times the bytes per second).
    Cost(Prices),
}

/// What the engine needs of one auto rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Candidate labels (specs as `Candidate` prints them), in the rule's order;
    /// ties between equal options go to the earlier one, after "as sent".
    pub candidates: Vec<String>,
    /// CPU budget of the rule's topics in cores (`None`: unlimited).
    pub budget_cores: Option<f64>,
    pub objective: Objective,
    /// Trials every candidate needs before a topic's first choice.
    pub min_samples: u64,
    /// Relative gain over the current choice needed to change.
    pub margin: f64,
    /// Changes allowed per topic in any sliding hour.
    pub max_changes_per_hour: u32,
    /// Half-life of the figures in decision windows ([`Settings::decay_factor`]).
    pub decay_half_life_windows: f64,
}

impl Settings {
    /// The factor to [`TopicFigures::decay`] figures with once per window.
    pub fn decay_factor(&self) -> f64 {
        decay_factor(self.decay_half_life_windows)
    }
}

/// A topic's current choice.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Choice {
    /// The chosen candidate's label; `None` = as sent (the producer's batch).
    pub candidate: Option<String>,
    /// When the choice was made, in ms since the epoch.
    pub since_ms: u64,
    /// When the topic's choice changed within the last hour (the first choice counts).
    pub changes: Vec<u64>,
}

/// A topic's outcome: its choice (`None`: undecided, the rule's initial policy
/// applies) and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    pub choice: Option<Choice>,
    pub explanation: Explanation,
}

/// Why a candidate cannot be chosen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ineligible {
    /// Fewer trials than `min_samples`.
    TooFewSamples { have: u64, need: u64 },
    /// Its batches are on average not smaller than as sent.
    DoesNotShrink,
    /// It saves less than `margin` of as sent: not worth a change from as sent, and
    /// a payload turning incompressible leaves it sooner than by growth alone.
    WithinMargin,
}

impl fmt::Display for Ineligible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ineligible::TooFewSamples { have, need } => {
                write!(f, "{have} of {need} samples")
            }
            Ineligible::DoesNotShrink => f.write_str("does not shrink batches"),
            Ineligible::WithinMargin => f.write_str("saves less than the margin"),
        }
    }
}

/// One option of a topic, as `/policy` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CandidateExplanation {
    /// `None` = as sent.
    pub candidate: Option<String>,
    /// Stored bytes over bytes as sent (`bytes_out / bytes_in`).
    pub ratio: f64,
    /// CPU ms per MB (10^6 bytes) of uncompressed records.
    pub cpu_ms_per_mb: f64,
    pub samples: u64,
    /// Predicted cores at the topic's traffic.
    pub cores: f64,
    /// The objective's value (see [`Objective`]): lower is better.
    pub objective: f64,
    /// `None`: eligible.
    pub ineligible: Option<Ineligible>,
}

/// Why a topic has its choice.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// As sent first, then the rule's candidates in order.
    pub candidates: Vec<CandidateExplanation>,
    /// The topic's traffic as sent, bytes per second.
    pub traffic_bytes_per_s: f64,
    /// Predicted cores of all the rule's topics under their choices.
    pub budget_used_cores: f64,
    pub budget_limit_cores: Option<f64>,
    /// Whether the topic has a choice.
    pub decided: bool,
    /// The choice (`None`: as sent, or undecided).
    pub choice: Option<String>,
    pub since_ms: Option<u64>,
    /// One line for humans.
    pub why: String,
}

/// One option of a topic, evaluated.
#[derive(Debug, Clone)]
struct Opt {
    label: Option<String>,
    ratio: f64,
    /// Variance of the mean ratio (per-sample variance / weight); 0 for as sent.
    mean_var: f64,
    cores: f64,
    value: f64,
    cpu_ms_per_mb: f64,
    samples: u64,
    ineligible: Option<Ineligible>,
}

impl Opt {
    fn name(&self) -> &str {
        label_name(&self.label)
    }
}

fn label_name(label: &Option<String>) -> &str {
    label.as_deref().unwrap_or("as sent")
}

/// How a topic enters the budget search.
#[derive(Debug)]
struct TopicState {
    options: Vec<Opt>,
    /// Indices into `options` the search may pick.
    allowed: Vec<usize>,
    /// Index of the current choice in `options`, if any and still an option.
    current: Option<usize>,
    frozen: bool,
    /// Kept because the previous choice has too few samples.
    holding: bool,
    undecided: bool,
    rate: f64,
    /// d objective / d ratio, for the standard error of a value difference.
    slope: f64,
    /// Variance of the mean paired ratio difference, by [`pair_key`].
    paired: BTreeMap<String, f64>,
}

/// Decides every topic of one auto rule: those in `figures` and those with a
/// `previous` choice. Deterministic: the same inputs give the same outputs, whatever
/// order the maps were filled in, and float sums are rounded to 12 significant digits
/// before use so that summation order does not show.
///
/// - A topic gets no first choice until every candidate has `min_samples` trials.
/// - Options: as sent (ratio 1, no CPU) and every candidate with `min_samples` trials
///   whose `bytes_out / bytes_in` is below `1 - margin` (so never one that grows
///   batches).
/// - A decided topic changes only to an option whose objective beats the current one
///   by more than `margin` (relative) and by more than 2 standard errors of the
///   difference: `2 × slope × sqrt(var_d / w_d)` from the pair's per-batch ratio
///   differences ([`TopicFigures::pairs`]: `var_d = diff_sq_sum / w_d - (diff_sum /
///   w_d)^2`, times `w_d / (w_d - 1)`) when there are any, else the unpaired
///   `2 × slope × sqrt(var_a / w_a + var_b / w_b)` with `var` each option's per-sample
///   ratio variance (from `ratio_sum` and `ratio_sq_sum` likewise; 0 for as sent), `w`
///   the decayed sample weights and `slope` the objective per unit of ratio (`traffic`
///   for bytes, `(stored_per_gb + moved_per_gb) × traffic / 10^9` for cost); and at
///   most `max_changes_per_hour` times in any sliding hour.
/// - Budget: a multiple-choice knapsack over the topics, minimizing the summed
///   objective within `budget_cores`: exhaustive up to [`EXACT_SEARCH_MAX`]
///   combinations of [`EXACT_SEARCH_TOPICS_MAX`] topics, else from the cheapest
///   option of each topic, upgrades by the best objective gain per added core (ties:
///   topic name, then option order). When even the cheapest allowed options exceed
///   the budget, stability yields: every option of topics not at their change limit
///   is allowed. Undecided topics cost nothing here (their initial policy is not
///   counted).
pub fn decide(
    settings: &Settings,
    figures: &BTreeMap<String, TopicFigures>,
    previous: &BTreeMap<String, Choice>,
    now_ms: u64,
) -> BTreeMap<String, Decision> {
    let empty = TopicFigures::default();
    let mut topics: BTreeMap<&str, (TopicState, Option<&Choice>)> = BTreeMap::new();
    for name in figures.keys().chain(previous.keys()) {
        if topics.contains_key(name.as_str()) {
            continue;
        }
        let topic_figures = figures.get(name).unwrap_or(&empty);
        let prev = previous.get(name);
        let state = topic_state(settings, topic_figures, prev, now_ms);
        topics.insert(name.as_str(), (state, prev));
    }

    let limit = settings
        .budget_cores
        .filter(|c| c.is_finite() && *c >= 0.0)
        .unwrap_or(f64::INFINITY);
    let min_cores: f64 = topics
        .values()
        .filter(|(s, _)| !s.undecided)
        .map(|(s, _)| {
            s.allowed
                .iter()
                .map(|&i| s.options[i].cores)
                .fold(f64::INFINITY, f64::min)
        })
        .sum();
    let forced = canon(min_cores) > limit;
    if forced {
        for (state, _) in topics.values_mut() {
            if !state.frozen && !state.undecided {
                state.allowed = eligible_indices(&state.options);
            }
        }
    }

    let names: Vec<&str> = topics
        .iter()
        .filter(|(_, (s, _))| !s.undecided)
        .map(|(n, _)| *n)
        .collect();
    let sets: Vec<&TopicState> = names.iter().map(|n| &topics[n].0).collect();
    let picks = solve(&sets, limit);
    let used: f64 = canon(
        sets.iter()
            .zip(&picks)
            .map(|(s, &i)| s.options[i].cores)
            .sum(),
    );
    let budget_limit = settings.budget_cores;
    let pick_of: BTreeMap<&str, usize> = names.iter().copied().zip(picks).collect();

    let mut out = BTreeMap::new();
    for (name, (state, prev)) in &topics {
        let pick = pick_of.get(name).copied();
        let (choice, why) = match pick {
            None => (None, why_undecided(settings, state)),
            Some(i) => {
                let picked = &state.options[i];
                let mut changes: Vec<u64> =
                    prev.map(|p| recent(&p.changes, now_ms)).unwrap_or_default();
                let same = prev.is_some_and(|p| p.candidate == picked.label);
                let since = match prev {
                    Some(p) if same => p.since_ms,
                    _ => {
                        changes.push(now_ms);
                        now_ms
                    }
                };
                let why = why_decided(settings, state, i, *prev, same, forced, used);
                (
                    Some(Choice {
                        candidate: picked.label.clone(),
                        since_ms: since,
                        changes,
                    }),
                    why,
                )
            }
        };
        let explanation = Explanation {
            candidates: state
                .options
                .iter()
                .map(|o| CandidateExplanation {
                    candidate: o.label.clone(),
                    ratio: o.ratio,
                    cpu_ms_per_mb: o.cpu_ms_per_mb,
                    samples: o.samples,
                    cores: o.cores,
                    objective: o.value,
                    ineligible: o.ineligible.clone(),
                })
                .collect(),
            traffic_bytes_per_s: state.rate,
            budget_used_cores: used,
            budget_limit_cores: budget_limit,
            decided: choice.is_some(),
            choice: choice.as_ref().and_then(|c| c.candidate.clone()),
            since_ms: choice.as_ref().map(|c| c.since_ms),
            why,
        };
        out.insert(
            (*name).to_owned(),
            Decision {
                choice,
                explanation,
            },
        );
    }
    out
}

/// The change times within the hour before `now_ms`.
fn recent(changes: &[u64], now_ms: u64) -> Vec<u64> {
    let mut kept: Vec<u64> = changes
        .iter()
        .copied()
        .filter(|&t| t <= now_ms && now_ms - t < HOUR_MS)
        .collect();
    kept.sort_unstable();
    kept
}

/// Rounds to 12 significant digits, so that values computed from sums added in a
/// different order compare equal.
fn canon(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let digits = 12 - (x.abs().log10().floor() as i32) - 1;
    if !(-300..=300).contains(&digits) {
        return x;
    }
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

fn topic_state(
    settings: &Settings,
    figures: &TopicFigures,
    prev: Option<&Choice>,
    now_ms: u64,
) -> TopicState {
    let rate = if figures.span_ms > 0 {
        canon(figures.traffic_bytes as f64 * 1000.0 / figures.span_ms as f64)
    } else {
        0.0
    };
    let slope = match settings.objective {
        Objective::Bytes => rate,
        Objective::Cost(p) => canon((p.stored_per_gb + p.moved_per_gb) * rate / BYTES_PER_GB),
    };
    let value = |ratio: f64, cores: f64| -> f64 {
        canon(match settings.objective {
            Objective::Bytes => ratio * rate,
            Objective::Cost(p) => {
                (p.stored_per_gb + p.moved_per_gb) * ratio * rate / BYTES_PER_GB
                    + p.core_hour * cores / SECONDS_PER_HOUR
            }
        })
    };
    let mut options = vec![Opt {
        label: None,
        ratio: 1.0,
        mean_var: 0.0,
        cores: 0.0,
        value: value(1.0, 0.0),
        cpu_ms_per_mb: 0.0,
        samples: 0,
        ineligible: None,
    }];
    let none = CandidateFigures::default();
    for label in &settings.candidates {
        if options.iter().any(|o| o.label.as_deref() == Some(label)) {
            continue;
        }
        let f = figures.candidates.get(label).unwrap_or(&none);
        options.push(evaluate(settings, label, f, rate, &value));
    }
    let undecided_by_samples = options
        .iter()
        .any(|o| matches!(o.ineligible, Some(Ineligible::TooFewSamples { .. })));
    let paired: BTreeMap<String, f64> = figures
        .pairs
        .iter()
        .filter_map(|(key, p)| {
            let w = canon(p.weight);
            (w > 1.0).then(|| {
                let mean = canon(p.diff_sum) / w;
                let var = (canon(p.diff_sq_sum) / w - mean * mean).max(0.0) * w / (w - 1.0);
                (key.clone(), canon(var / w))
            })
        })
        .collect();
    let current = prev.and_then(|p| {
        options
            .iter()
            .position(|o| o.label == p.candidate && o.ineligible.is_none())
    });
    let frozen = prev.is_some_and(|p| {
        recent(&p.changes, now_ms).len() >= settings.max_changes_per_hour as usize
    });
    // The previous choice among the options, eligible or not.
    let previous_index = prev.and_then(|p| options.iter().position(|o| o.label == p.candidate));
    // Figures short of samples (a replica restarted, a new fleet) do not undo a choice.
    let holding = !frozen
        && previous_index.is_some_and(|i| {
            matches!(
                options[i].ineligible,
                Some(Ineligible::TooFewSamples { .. })
            )
        });
    let undecided = prev.is_none() && undecided_by_samples;
    let allowed = match (prev, current) {
        // At the change limit or short of samples: the previous choice stays,
        // whatever it is.
        (Some(p), _) if frozen || holding => match previous_index {
            Some(i) => vec![i],
            None => {
                // The previous candidate left the rule; it still stays, costed as
                // its figures say.
                let f = figures
                    .candidates
                    .get(p.candidate.as_deref().unwrap_or(""))
                    .unwrap_or(&none);
                let mut kept = evaluate(settings, label_name(&p.candidate), f, rate, &value);
                kept.label = p.candidate.clone();
                options.push(kept);
                vec![options.len() - 1]
            }
        },
        (Some(_), Some(c)) => {
            let mut allowed = vec![c];
            for (i, o) in options.iter().enumerate() {
                if i != c
                    && o.ineligible.is_none()
                    && significantly_better(settings, o, &options[c], slope, &paired)
                {
                    allowed.push(i);
                }
            }
            allowed.sort_unstable();
            allowed
        }
        _ => eligible_indices(&options),
    };
    TopicState {
        options,
        allowed,
        current,
        frozen,
        holding,
        undecided,
        rate,
        slope,
        paired,
    }
}

fn evaluate(
    settings: &Settings,
    label: &str,
    f: &CandidateFigures,
    rate: f64,
    value: &dyn Fn(f64, f64) -> f64,
) -> Opt {
    let ratio = if f.bytes_in > 0 {
        canon(f.bytes_out as f64 / f.bytes_in as f64)
    } else {
        1.0
    };
    let cores = if f.bytes_in > 0 {
        canon(rate * f.cpu_nanos as f64 / f.bytes_in as f64 / 1e9)
    } else {
        0.0
    };
    let w = canon(f.weight);
    let mean_var = if w > 1.0 {
        let mean = canon(f.ratio_sum) / w;
        let var = (canon(f.ratio_sq_sum) / w - mean * mean).max(0.0) * w / (w - 1.0);
        canon(var / w)
    } else {
        f64::INFINITY
    };
    let ineligible = if f.samples < settings.min_samples {
        Some(Ineligible::TooFewSamples {
            have: f.samples,
            need: settings.min_samples,
        })
    } else if f.bytes_in == 0 || f.bytes_out >= f.bytes_in {
        Some(Ineligible::DoesNotShrink)
    } else if ratio > 1.0 - settings.margin {
        Some(Ineligible::WithinMargin)
    } else {
        None
    };
    Opt {
        label: Some(label.to_owned()),
        ratio,
        mean_var,
        cores,
        value: value(ratio, cores),
        cpu_ms_per_mb: if f.raw_bytes > 0 {
            // ns per byte = ms per 10^6 bytes.
            canon(f.cpu_nanos as f64 / f.raw_bytes as f64)
        } else {
            0.0
        },
        samples: f.samples,
        ineligible,
    }
}

fn eligible_indices(options: &[Opt]) -> Vec<usize> {
    (0..options.len())
        .filter(|&i| options[i].ineligible.is_none())
        .collect()
}

/// Twice the standard error of the objective difference of two options: from their
/// paired ratio differences when both are candidates with such figures, else from
/// each one's ratio variance (as sent has none).
fn two_se(a: &Opt, b: &Opt, slope: f64, paired: &BTreeMap<String, f64>) -> f64 {
    let var = match (&a.label, &b.label) {
        (Some(x), Some(y)) => paired
            .get(&pair_key(x, y))
            .copied()
            .unwrap_or(a.mean_var + b.mean_var),
        _ => a.mean_var + b.mean_var,
    };
    2.0 * slope * var.sqrt()
}

fn significantly_better(
    settings: &Settings,
    new: &Opt,
    current: &Opt,
    slope: f64,
    paired: &BTreeMap<String, f64>,
) -> bool {
    let gain = current.value - new.value;
    gain > 0.0
        && current.value > 0.0
        && gain / current.value > settings.margin
        && gain > two_se(new, current, slope, paired)
}

/// The picked option of each topic: the least summed objective within `limit`.
fn solve(sets: &[&TopicState], limit: f64) -> Vec<usize> {
    let combinations = sets
        .iter()
        .try_fold(1u64, |n, s| n.checked_mul(s.allowed.len().max(1) as u64));
    match combinations {
        Some(n) if n <= EXACT_SEARCH_MAX && sets.len() <= EXACT_SEARCH_TOPICS_MAX => {
            exact(sets, limit)
        }
        _ => greedy(sets, limit),
    }
}

/// Every combination, in topic order and each topic's option order; the first with
/// the least objective (then the fewest cores) wins. The all-cheapest combination
/// stands when none fits.
fn exact(sets: &[&TopicState], limit: f64) -> Vec<usize> {
    let mut best: Option<(f64, f64, Vec<usize>)> = None;
    let mut pick = vec![0usize; sets.len()];
    walk(sets, limit, 0, 0.0, 0.0, &mut pick, &mut best);
    match best {
        Some((_, _, picks)) => picks,
        None => greedy(sets, limit),
    }
}

fn walk(
    sets: &[&TopicState],
    limit: f64,
    depth: usize,
    value: f64,
    cores: f64,
    pick: &mut Vec<usize>,
    best: &mut Option<(f64, f64, Vec<usize>)>,
) {
    if canon(cores) > limit {
        return;
    }
    if depth == sets.len() {
        let (v, c) = (canon(value), canon(cores));
        let better = match best {
            None => true,
            Some((bv, bc, _)) => v < *bv || (v == *bv && c < *bc),
        };
        if better {
            *best = Some((v, c, pick.clone()));
        }
        return;
    }
    let set = sets[depth];
    for &i in &set.allowed {
        pick[depth] = i;
        let o = &set.options[i];
        walk(
            sets,
            limit,
            depth + 1,
            value + o.value,
            cores + o.cores,
            pick,
            best,
        );
    }
}

/// From each topic's cheapest allowed option, upgrades by the best objective gain per
/// added core while within `limit` (an upgrade adding no core comes first).
fn greedy(sets: &[&TopicState], limit: f64) -> Vec<usize> {
    let mut picks: Vec<usize> = sets
        .iter()
        .map(|s| {
            let mut best = s.allowed.first().copied().unwrap_or(0);
            for &i in &s.allowed {
                let (o, b) = (&s.options[i], &s.options[best]);
                if o.cores < b.cores || (o.cores == b.cores && o.value < b.value) {
                    best = i;
                }
            }
            best
        })
        .collect();
    let mut used: f64 = sets
        .iter()
        .zip(&picks)
        .map(|(s, &i)| s.options[i].cores)
        .sum();
    loop {
        let mut best: Option<(f64, usize, usize)> = None;
        for (t, s) in sets.iter().enumerate() {
            let cur = &s.options[picks[t]];
            for &i in &s.allowed {
                let o = &s.options[i];
                let gain = cur.value - o.value;
                if gain <= 0.0 {
                    continue;
                }
                let added = o.cores - cur.cores;
                if canon(used + added) > limit {
                    continue;
                }
                let efficiency = if added <= 0.0 {
                    f64::INFINITY
                } else {
                    canon(gain / added)
                };
                if best.is_none_or(|(e, _, _)| efficiency > e) {
                    best = Some((efficiency, t, i));
                }
            }
        }
        let Some((_, t, i)) = best else { break };
        used += sets[t].options[i].cores - sets[t].options[picks[t]].cores;
        picks[t] = i;
    }
    picks
}

fn percent(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

fn budget_phrase(settings: &Settings, used: f64) -> String {
    match settings.budget_cores {
        Some(limit) => format!("{used:.2} of {limit} cores"),
        None => format!("{used:.2} cores, no budget"),
    }
}

fn why_undecided(settings: &Settings, state: &TopicState) -> String {
    let short: Vec<String> = state
        .options
        .iter()
        .filter_map(|o| match &o.ineligible {
            Some(Ineligible::TooFewSamples { have, .. }) => Some(format!("{} {have}", o.name())),
            _ => None,
        })
        .collect();
    format!(
        "undecided: every candidate needs {} samples ({})",
        settings.min_samples,
        short.join(", ")
    )
}

fn why_decided(
    settings: &Settings,
    state: &TopicState,
    pick: usize,
    prev: Option<&Choice>,
    same: bool,
    forced: bool,
    used: f64,
) -> String {
    let picked = &state.options[pick];
    let budget = budget_phrase(settings, used);
    let stores = format!("{} stores {:.2} of as sent", picked.name(), picked.ratio);
    // The best eligible option other than the pick, by objective.
    let runner_up = state
        .options
        .iter()
        .enumerate()
        .filter(|(i, o)| *i != pick && o.ineligible.is_none())
        .min_by(|(_, a), (_, b)| a.value.total_cmp(&b.value))
        .map(|(_, o)| o);
    if state.frozen {
        return format!(
            "{stores}; kept: {} changes in the last hour is the limit; {budget}",
            settings.max_changes_per_hour
        );
    }
    if state.holding {
        return format!(
            "{stores}; kept: {} of {} samples since the figures restarted; {budget}",
            picked.samples, settings.min_samples
        );
    }
    if picked.label.is_none() && state.options.iter().skip(1).all(|o| o.ineligible.is_some()) {
        return format!(
            "as sent: no candidate saves more than the {} margin; {budget}",
            percent(settings.margin)
        );
    }
    match prev {
        Some(p) if !same => {
            let old = state.current.map(|c| &state.options[c]);
            match old {
                Some(old) => format!(
                    "{stores}, {} smaller than {} beyond the {} margin; {budget}{}",
                    percent(relative_gain(old, picked)),
                    old.name(),
                    percent(settings.margin),
                    if forced {
                        " (over budget: options widened)"
                    } else {
                        ""
                    }
                ),
                None => format!(
                    "{stores}; {} is no option now; {budget}",
                    label_name(&p.candidate)
                ),
            }
        }
        Some(_) => match runner_up {
            Some(r) if r.value < picked.value => {
                let gain = relative_gain(picked, r);
                let reason = if gain <= settings.margin {
                    format!("within the {} margin", percent(settings.margin))
                } else if !significantly_better(settings, r, picked, state.slope, &state.paired) {
                    "within noise (2 standard errors)".to_owned()
                } else {
                    "beyond the budget".to_owned()
                };
                format!(
                    "{stores}; kept: {} would be {} smaller, {reason}; {budget}",
                    r.name(),
                    percent(gain)
                )
            }
            _ => format!("{stores}, the best option; {budget}"),
        },
        None => match runner_up {
            Some(r) => format!(
                "{stores}, {} smaller than {}; first choice; {budget}",
                percent(relative_gain(r, picked)),
                r.name()
            ),
            None => format!("{stores}; first choice; {budget}"),
        },
    }
}

/// How much smaller `new`'s objective is than `old`'s, relative to `old`.
fn relative_gain(old: &Opt, new: &Opt) -> f64 {
    if old.value > 0.0 {
        (old.value - new.value) / old.value
    } else {
        0.0
    }
}
