//! `compression.type = "auto"`: a rule whose topics each get the candidate codec the
//! autopilot chooses from shadow trials, and `[autopilot]`, the fleet's shared settings.
//! Every default of the `auto.*` and `[autopilot]` keys is here.

use std::fmt;
use std::time::Duration;

use kpress_codec::Candidate;

use crate::settings::CpuShare;

/// `auto.candidates` unset: one fast and one dense codec of each family Kafka clients
/// read, at the levels operators most often pick.
pub const AUTO_CANDIDATES_DEFAULT: [&str; 4] = ["zstd:3", "lz4", "gzip:6", "snappy"];
/// The label of a choice to leave batches as the producer sent them (as
/// `auto.initial` spells it), beside the candidates' specs.
pub const AUTO_AS_SENT: &str = "producer";
/// `auto.objective` unset.
pub const AUTO_OBJECTIVE_DEFAULT: AutoObjective = AutoObjective::Bytes;
/// `auto.price_per_gb_stored` unset, in USD per GB stored. A placeholder: an operator
/// who sets `auto.objective = "cost"` should set the prices they pay.
pub const AUTO_PRICE_PER_GB_STORED_DEFAULT: f64 = 0.10;
/// `auto.price_per_gb_moved` unset, in USD per GB moved (network, replication). A
/// placeholder to set for `"cost"`.
pub const AUTO_PRICE_PER_GB_MOVED_DEFAULT: f64 = 0.02;
/// `auto.price_per_core_hour` unset, in USD per core-hour of rewrite CPU. A
/// placeholder to set for `"cost"`.
pub const AUTO_PRICE_PER_CORE_HOUR_DEFAULT: f64 = 0.04;
/// `auto.min_samples` unset: trial samples a topic needs before its first choice.
pub const AUTO_MIN_SAMPLES_DEFAULT: u64 = 30;
/// The share of an undecided auto topic's batches the shadow trials sample (or
/// `[shadow] sample` if higher), so a first choice comes within minutes; a decided
/// topic is sampled at `[shadow] sample`.
pub const AUTO_EXPLORE_SAMPLE: f64 = 0.1;
/// `auto.min_samples`' largest value.
pub const AUTO_MIN_SAMPLES_MAX: u64 = 1_000_000;
/// `auto.margin` unset: the relative gain over the current choice a change needs.
pub const AUTO_MARGIN_DEFAULT: f64 = 0.02;
/// `auto.max_changes_per_hour` unset: changes of one topic's choice in a sliding hour.
pub const AUTO_MAX_CHANGES_PER_HOUR_DEFAULT: u32 = 4;
/// `auto.max_changes_per_hour`' largest value: one a minute.
pub const AUTO_MAX_CHANGES_PER_HOUR_MAX: u32 = 60;
/// `auto.max_cores`' largest value.
pub const AUTO_MAX_CORES_MAX: f64 = 1024.0;
/// A price's largest value, in USD.
pub const AUTO_PRICE_MAX: f64 = 1_000_000.0;

/// `[autopilot] topic` unset: the compacted topic the fleet shares figures and choices in.
pub const AUTOPILOT_TOPIC_DEFAULT: &str = "_kpress_autopilot";
/// `[autopilot] share` unset: replicas decide together.
pub const AUTOPILOT_SHARE_DEFAULT: bool = true;
/// `[autopilot] window_ms` unset: how often figures are published and choices made.
pub const AUTOPILOT_WINDOW_MS_DEFAULT: u64 = 60_000;
/// `[autopilot] window_ms`' smallest value.
pub const AUTOPILOT_WINDOW_MS_MIN: u64 = 100;
/// `[autopilot] window_ms`' largest value: an hour.
pub const AUTOPILOT_WINDOW_MS_MAX: u64 = 3_600_000;
/// `[autopilot] replication_factor` unset: the broker's `default.replication.factor`.
pub const AUTOPILOT_REPLICATION_FACTOR_DEFAULT: i16 = -1;

/// A rule's `auto.*` keys: what the autopilot chooses among for its topics, and how.
/// Kept (at its defaults) on rules that are not `auto` too, so rules inherit it.
#[derive(Debug, Clone, PartialEq)]
pub struct AutoPolicy {
    /// `auto.candidates`: the specs chosen among, without repeats, at most
    /// [`crate::SHADOW_CANDIDATES_MAX`]; each is also a shadow trial candidate.
    pub candidates: Vec<Candidate>,
    /// `auto.initial`: what an undecided topic gets; `None` (`"producer"`, the
    /// default): its batches pass as sent.
    pub initial: Option<Candidate>,
    /// `auto.max_cores` or `auto.max_cpu_share`: the rewrite CPU the rule's topics may
    /// take together.
    pub budget: AutoBudget,
    /// `auto.objective`.
    pub objective: AutoObjective,
    /// `auto.price_per_*`: read by the `cost` objective.
    pub prices: AutoPrices,
    /// `auto.min_samples`.
    pub min_samples: u64,
    /// `auto.margin`: in `[0, 1]`.
    pub margin: f64,
    /// `auto.max_changes_per_hour`.
    pub max_changes_per_hour: u32,
}

// Never NaN: every number is read finite and within its range.
impl Eq for AutoPolicy {}

/// The rewrite CPU an auto rule's topics may take together.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AutoBudget {
    /// Neither `auto.max_cores` nor `auto.max_cpu_share`.
    Unlimited,
    /// `auto.max_cores`: cores of rewrite CPU, in `(0, AUTO_MAX_CORES_MAX]`.
    Cores(f64),
    /// `auto.max_cpu_share`: a share of kpress's work slots.
    CpuShare(CpuShare),
}

/// `auto.objective`: what a choice minimizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoObjective {
    /// `bytes`: stored bytes.
    Bytes,
    /// `cost`: the price of the bytes stored and moved plus that of the CPU spent.
    Cost,
}

impl AutoObjective {
    /// The values the file takes, with what each reads as.
    pub const CHOICES: [(&'static str, AutoObjective); 2] = [
        ("bytes", AutoObjective::Bytes),
        ("cost", AutoObjective::Cost),
    ];

    pub fn name(self) -> &'static str {
        match self {
            AutoObjective::Bytes => "bytes",
            AutoObjective::Cost => "cost",
        }
    }
}

/// `auto.price_per_*`, in USD.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AutoPrices {
    /// `auto.price_per_gb_stored`: per GB stored.
    pub stored_per_gb: f64,
    /// `auto.price_per_gb_moved`: per GB moved.
    pub moved_per_gb: f64,
    /// `auto.price_per_core_hour`: per core-hour of rewrite CPU.
    pub core_hour: f64,
}

impl Default for AutoPrices {
    fn default() -> Self {
        AutoPrices {
            stored_per_gb: AUTO_PRICE_PER_GB_STORED_DEFAULT,
            moved_per_gb: AUTO_PRICE_PER_GB_MOVED_DEFAULT,
            core_hour: AUTO_PRICE_PER_CORE_HOUR_DEFAULT,
        }
    }
}

impl Default for AutoPolicy {
    fn default() -> Self {
        AutoPolicy {
            candidates: default_candidates(),
            initial: None,
            budget: AutoBudget::Unlimited,
            objective: AUTO_OBJECTIVE_DEFAULT,
            prices: AutoPrices::default(),
            min_samples: AUTO_MIN_SAMPLES_DEFAULT,
            margin: AUTO_MARGIN_DEFAULT,
            max_changes_per_hour: AUTO_MAX_CHANGES_PER_HOUR_DEFAULT,
        }
    }
}

/// [`AUTO_CANDIDATES_DEFAULT`], parsed.
pub fn default_candidates() -> Vec<Candidate> {
    AUTO_CANDIDATES_DEFAULT
        .iter()
        .map(|spec| spec.parse().expect("a default candidate is a valid spec"))
        .collect()
}

/// Prints the settings as `/policy` and `check-config` show them, inside `auto (…)`.
impl fmt::Display for AutoPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let candidates: Vec<String> = self.candidates.iter().map(ToString::to_string).collect();
        write!(f, "candidates {}; initial ", candidates.join(", "))?;
        match &self.initial {
            Some(initial) => write!(f, "{initial}")?,
            None => f.write_str("producer")?,
        }
        write!(f, "; objective {}", self.objective.name())?;
        if self.objective == AutoObjective::Cost {
            let p = self.prices;
            write!(
                f,
                " (USD {} per GB stored, {} per GB moved, {} per core-hour)",
                p.stored_per_gb, p.moved_per_gb, p.core_hour
            )?;
        }
        match self.budget {
            AutoBudget::Unlimited => f.write_str("; budget none")?,
            AutoBudget::Cores(cores) => write!(f, "; budget {cores} cores")?,
            AutoBudget::CpuShare(share) => write!(f, "; budget {share} of rewrite CPU")?,
        }
        write!(
            f,
            "; min {} samples, margin {}%, at most {} changes/hour",
            self.min_samples,
            // Hundredths of a percent: 0.07 prints 7, not 7.000000000000001.
            (self.margin * 10_000.0).round() / 100.0,
            self.max_changes_per_hour
        )
    }
}

/// `[autopilot]`: how the replicas of a fleet share trial figures and choices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutopilotSettings {
    /// `topic`: the compacted topic shared by the fleet, a legal Kafka topic name.
    pub topic: String,
    /// `share`: `false` decides alone and never touches the topic.
    pub share: bool,
    /// `window_ms`: how often figures are published and choices made.
    pub window: Duration,
    /// `replication_factor`: of the topic when kpress creates it; `-1`: the broker's
    /// default.
    pub replication_factor: i16,
}

impl Default for AutopilotSettings {
    fn default() -> Self {
        AutopilotSettings {
            topic: AUTOPILOT_TOPIC_DEFAULT.to_owned(),
            share: AUTOPILOT_SHARE_DEFAULT,
            window: Duration::from_millis(AUTOPILOT_WINDOW_MS_DEFAULT),
            replication_factor: AUTOPILOT_REPLICATION_FACTOR_DEFAULT,
        }
    }
}

impl crate::Config {
    /// The shadow trials to run: `[shadow]` as written, or, when some rule (or
    /// `[defaults]`) is `auto` and the file has no `[shadow]`, `[shadow]`'s defaults;
    /// either way with every auto rule's `auto.candidates` added to the candidates
    /// (first appearance kept, no repeats). `None`: no trials. The union is at most
    /// [`crate::SHADOW_CANDIDATES_MAX`]: a file over it does not load.
    pub fn trial_settings(&self) -> Option<crate::ShadowSettings> {
        let auto: Vec<&AutoPolicy> = self.auto_policies().collect();
        if auto.is_empty() {
            return self.shadow.clone();
        }
        let mut settings = self.shadow.clone().unwrap_or_else(shadow_defaults);
        settings.candidates = trial_candidates(&settings.candidates, auto.into_iter());
        Some(settings)
    }

    /// The `auto.*` settings of every auto rule, in file order, then `[defaults]`'s
    /// when it is auto.
    pub(crate) fn auto_policies(&self) -> impl Iterator<Item = &AutoPolicy> {
        self.topics
            .iter()
            .map(|rule| &rule.policy)
            .chain(std::iter::once(&self.defaults))
            .filter(|policy| policy.compression == crate::Compression::Auto)
            .map(|policy| &policy.auto)
    }
}

/// `[shadow]` with every key at its default and no candidates yet.
fn shadow_defaults() -> crate::ShadowSettings {
    crate::ShadowSettings {
        sample: crate::SHADOW_SAMPLE_DEFAULT,
        candidates: Vec::new(),
        max_cpu_fraction: crate::SHADOW_MAX_CPU_FRACTION_DEFAULT,
        threads: crate::SHADOW_THREADS_DEFAULT,
        max_queue_bytes: crate::SHADOW_MAX_QUEUE_BYTES_DEFAULT,
    }
}

/// `shadow` then each auto policy's candidates, each once, in order of appearance.
pub(crate) fn trial_candidates<'a>(
    shadow: &[Candidate],
    auto: impl Iterator<Item = &'a AutoPolicy>,
) -> Vec<Candidate> {
    let mut out = shadow.to_vec();
    for candidate in auto.flat_map(|policy| &policy.candidates) {
        if !out.contains(candidate) {
            out.push(candidate.clone());
        }
    }
    out
}
