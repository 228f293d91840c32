//! The autopilot of a process: every `[autopilot] window_ms` it takes the window's
//! figures from the [`Collector`], forgets old figures exponentially, exchanges
//! figures and choices with the fleet (when `[autopilot] share` and the fleet topic
//! opens), decides each auto rule's topics with the engine and applies the choices:
//! the Produce path reads them from memory ([`AutoChoiceSource`]).
//!
//! In a fleet, every replica publishes its own decayed cumulative figures each window
//! and merges the latest of every replica (its own included), so all decide on the
//! same figures; a choice record newer than a replica's own choice is adopted, so the
//! replicas converge. A replica that starts reads the whole compacted topic first and
//! begins with the stored choices, and with its own stored figures when its replica id
//! is the same as before (the host name and the listener port: see [`replica_id`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use kpress_autopilot::{
    decay_factor, decide, decode, encode_choice, encode_figures, Choice, Explanation, FleetRecord,
    FleetView, Objective, Prices, Settings, TopicFigures, DECAY_HALF_LIFE_WINDOWS_DEFAULT,
};
use kpress_config::{
    AutoBudget, AutoChoiceSource, AutoObjective, AutoPolicy, AutopilotSettings, Config, PolicySet,
    DEFAULTS_RULE,
};

use super::collector::Collector;
use super::metrics::{self, AS_SENT};
use super::store::{FleetStore, StoreError};
use crate::side::ClusterConnector;

/// Windows after which a replica's figures leave the merge (the replica is gone).
pub(crate) const FLEET_STALE_WINDOWS: u64 = 5;
/// The slowest pace of attempts to open the fleet topic after a transient failure.
pub(crate) const FLEET_RETRY: Duration = Duration::from_secs(30);
/// Reads at open, to take in the topic's history (each at most a MiB of batches).
const OPEN_READS_MAX: usize = 64;
/// Reads per window.
const WINDOW_READS_MAX: usize = 8;
/// Replicas taken in from the fleet topic (anyone who may write it may invent more).
pub(crate) const FLEET_REPLICAS_MAX: usize = 256;
/// Bytes of records per publish, well within a batch's limit.
const PUBLISH_CHUNK_BYTES: usize = 256 << 10;

/// A topic's choice as this process holds it.
#[derive(Debug, Clone, PartialEq)]
struct Held {
    choice: Choice,
    /// When it was decided (by this replica or the one it was adopted from).
    decided_ms: u64,
    /// Decided here (`None`) or adopted from that replica.
    from: Option<String>,
}

/// How the process decides.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    Shared,
    Alone(String),
}

/// One topic's last decision, for `/policy`.
#[derive(Debug, Clone)]
pub struct TopicStatus {
    pub topic: String,
    /// The auto rule's name: its match pattern, or `[defaults]`.
    pub rule: String,
    /// The chosen candidate's label, [`AS_SENT`] for as sent; `None`: undecided.
    pub choice: Option<String>,
    /// When the choice was made, ms since the epoch.
    pub since_ms: Option<u64>,
    /// The replica the choice was adopted from (`None`: decided here).
    pub adopted_from: Option<String>,
    pub explanation: Explanation,
}

/// The autopilot as `/policy` shows it.
#[derive(Debug, Clone)]
pub struct AutopilotStatus {
    /// Deciding with the fleet through the topic.
    pub shared: bool,
    /// Why it decides alone (`None` when shared).
    pub alone_because: Option<String>,
    pub topic: String,
    pub replica: String,
    /// Replicas whose figures the last decision merged (this one included).
    pub replicas: usize,
    pub window_ms: u64,
    /// When the last window ended, ms since the epoch.
    pub last_window_ms: Option<u64>,
    pub topics: Vec<TopicStatus>,
}

#[derive(Debug, Default)]
struct State {
    /// This replica's decayed cumulative figures per topic.
    own: BTreeMap<String, TopicFigures>,
    /// What the fleet topic says (own figures folded in each window).
    view: FleetView,
    /// Topics and replicas the view holds (bounded).
    view_topics: BTreeSet<String>,
    /// Each replica's latest window end.
    replicas_seen: BTreeMap<String, u64>,
    choices: BTreeMap<String, Held>,
    status: BTreeMap<String, TopicStatus>,
    /// The label each topic's gauge is at 1 for.
    gauges: BTreeMap<String, String>,
    mode: Option<Mode>,
    replicas: usize,
    last_window: Option<(Instant, u64)>,
}

/// A change of a topic's choice, logged and counted.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Change {
    pub(crate) topic: String,
    pub(crate) rule: String,
    /// The label in force before and after ([`AS_SENT`], a candidate, or the rule's
    /// initial policy's label while undecided).
    pub(crate) was: String,
    pub(crate) now: String,
    pub(crate) why: String,
}

/// The autopilot of one process; kept across reloads.
pub struct Autopilot {
    settings: AutopilotSettings,
    replica: String,
    work_slots: usize,
    cap: usize,
    collector: Arc<Collector>,
    /// topic → chosen label, read per partition by the Produce path.
    chosen: ArcSwap<HashMap<Box<str>, Arc<str>>>,
    state: Mutex<State>,
}

impl std::fmt::Debug for Autopilot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Autopilot")
            .field("replica", &self.replica)
            .field("topic", &self.settings.topic)
            .finish_non_exhaustive()
    }
}

impl AutoChoiceSource for Autopilot {
    fn auto_choice(&self, topic: &str) -> Option<Arc<str>> {
        self.chosen.load().get(topic).cloned()
    }
}

/// This process's replica id in the fleet: `HOSTNAME` (a pod's name), else the host
/// name, then `:` and the listener's port, so that processes on one host differ and a
/// restarted one (or its successor in a rolling restart) is the same replica.
pub fn replica_id(listener_port: u16) -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(host_name)
        .unwrap_or_else(|| "kpress".to_owned());
    format!("{host}:{listener_port}")
}

fn host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is valid for its length; gethostname writes at most that.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).into_owned();
    (!name.is_empty()).then_some(name)
}

/// The engine's settings of an auto rule. `replicas` scales the budget: in a fleet
/// every replica decides for the whole fleet's traffic, whose rewrite CPU the
/// replicas share, so the budget decided within is the rule's budget × the replicas
/// merged. `auto.max_cpu_share` is a share of this process's work slots (one per
/// CPU), in cores.
pub(crate) fn engine_settings(policy: &AutoPolicy, replicas: usize, work_slots: usize) -> Settings {
    let replicas = replicas.max(1) as f64;
    Settings {
        candidates: policy.candidates.iter().map(ToString::to_string).collect(),
        budget_cores: match policy.budget {
            AutoBudget::Unlimited => None,
            AutoBudget::Cores(cores) => Some(cores * replicas),
            AutoBudget::CpuShare(share) => Some(share.fraction() * work_slots as f64 * replicas),
        },
        objective: match policy.objective {
            AutoObjective::Bytes => Objective::Bytes,
            AutoObjective::Cost => Objective::Cost(Prices {
                stored_per_gb: policy.prices.stored_per_gb,
                moved_per_gb: policy.prices.moved_per_gb,
                core_hour: policy.prices.core_hour,
            }),
        },
        min_samples: policy.min_samples,
        margin: policy.margin,
        max_changes_per_hour: policy.max_changes_per_hour,
        decay_half_life_windows: DECAY_HALF_LIFE_WINDOWS_DEFAULT,
    }
}

/// The name of rule `index` of `config` as `/policy` and the metrics call it.
fn rule_name(config: &Config, index: usize) -> String {
    config
        .topics
        .get(index)
        .map_or_else(|| DEFAULTS_RULE.to_owned(), |rule| rule.pattern.to_string())
}

fn label(candidate: &Option<String>) -> String {
    candidate.clone().unwrap_or_else(|| AS_SENT.to_owned())
}

/// What an undecided topic of `policy` gets.
fn initial_label(policy: &AutoPolicy) -> String {
    policy
        .initial
        .as_ref()
        .map_or_else(|| AS_SENT.to_owned(), ToString::to_string)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Autopilot {
    /// The autopilot of a process known in the fleet as `replica`, tracking at most
    /// `cap` topics (`[limits] max_topic_labels`).
    pub fn new(settings: AutopilotSettings, replica: String, cap: usize) -> Arc<Autopilot> {
        Arc::new(Autopilot {
            settings,
            replica,
            work_slots: crate::shared::work_threads(),
            cap: cap.max(1),
            collector: Arc::new(Collector::new(cap.max(1))),
            chosen: ArcSwap::default(),
            state: Mutex::default(),
        })
    }

    /// Where the Produce path and the trial workers count what they see.
    pub fn collector(&self) -> &Arc<Collector> {
        &self.collector
    }

    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// `[autopilot] window_ms`.
    pub fn window_length(&self) -> Duration {
        self.settings.window
    }

    /// The fleet link the window task keeps: the store opens on the first window
    /// with an auto rule when `[autopilot] share` (through `connector`).
    pub fn fleet(&self, connector: Option<ClusterConnector>) -> FleetLink {
        FleetLink {
            connector: connector.filter(|_| self.settings.share),
            store: None,
            next_try: None,
            denied: false,
            failing: false,
        }
    }

    /// How old a replica's figures may be and still count.
    fn stale_ms(&self) -> u64 {
        self.settings.window.as_millis() as u64 * FLEET_STALE_WINDOWS
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One decision window: figures in, fleet exchange, decisions, choices applied.
    pub async fn window(&self, link: &mut FleetLink, config: &Config, rules: &PolicySet) {
        let now = now_ms();
        if rules.auto_rules().is_empty() {
            // Nothing to decide: choices of a rule a reload removed go.
            self.collector.take();
            let changes = {
                let mut st = self.lock();
                st.last_window = Some((Instant::now(), now));
                self.drop_undecidable(&mut st, rules, &|_| AS_SENT.to_owned())
            };
            self.apply(changes);
            return;
        }
        if !self.settings.share {
            self.set_mode(Mode::Alone("[autopilot] share = false".to_owned()));
        } else {
            self.open(link, config, rules).await;
        }
        if let Some(store) = link.store.as_mut() {
            match read_all(store, WINDOW_READS_MAX).await {
                Ok(records) => {
                    let mut st = self.lock();
                    self.fold(&mut st, records, false);
                }
                Err(err) => self.store_failed(link, err),
            }
        }
        let shared = link.store.is_some();
        let started = Instant::now();
        let (records, changes) = {
            let mut st = self.lock();
            self.step(&mut st, config, rules, now, shared)
        };
        self.apply(changes);
        if let Some(store) = link.store.as_mut() {
            let (figures, choices) = records;
            let mut published = Ok(());
            for chunk in chunks(&figures).chain(chunks(&choices)) {
                published = store.publish(chunk).await;
                if published.is_err() {
                    break;
                }
            }
            match published {
                Ok(()) => {
                    link.failing = false;
                    let mut st = self.lock();
                    self.fold(&mut st, choices, false);
                }
                Err(err) => self.store_failed(link, err),
            }
        }
        tracing::debug!(
            took_ms = started.elapsed().as_millis() as u64,
            shared,
            "autopilot: window decided"
        );
    }

    /// Opens the fleet topic when due: at the first window, then at [`FLEET_RETRY`]
    /// after a transient failure; never again once denied.
    async fn open(&self, link: &mut FleetLink, config: &Config, rules: &PolicySet) {
        if link.store.is_some() || link.denied {
            return;
        }
        let Some(connector) = &link.connector else {
            self.set_mode(Mode::Alone("no connection to the cluster".to_owned()));
            return;
        };
        if link.next_try.is_some_and(|at| Instant::now() < at) {
            return;
        }
        let topic = &self.settings.topic;
        let opened =
            FleetStore::open_through(connector, topic, self.settings.replication_factor).await;
        let mut store = match opened {
            Ok(store) => store,
            Err(err) => {
                link.denied = err.is_denied();
                link.next_try = Some(Instant::now() + FLEET_RETRY.max(self.settings.window));
                let retry = if link.denied {
                    String::new()
                } else {
                    format!(
                        "; trying again every {}s",
                        FLEET_RETRY.max(self.settings.window).as_secs()
                    )
                };
                self.set_mode(Mode::Alone(format!("{err}{retry}")));
                return;
            }
        };
        // The topic's history: the stored choices, and this replica's own figures.
        match read_all(&mut store, OPEN_READS_MAX).await {
            Ok(records) => {
                let mut st = self.lock();
                self.fold(&mut st, records, true);
            }
            Err(err) => {
                tracing::warn!(topic = %topic, error = %err, "autopilot: cannot read the fleet topic's history");
            }
        }
        link.store = Some(store);
        self.set_mode(Mode::Shared);
        // The stored choices apply at once.
        let changes = {
            let mut st = self.lock();
            self.adopt(&mut st, config, rules)
        };
        self.apply(changes);
    }

    /// A publish or read failed: denied, the process decides alone from now on; any
    /// other failure is logged once per streak and the next window tries again.
    fn store_failed(&self, link: &mut FleetLink, err: StoreError) {
        if err.is_denied() {
            link.store = None;
            link.denied = true;
            self.set_mode(Mode::Alone(err.to_string()));
        } else if !link.failing {
            link.failing = true;
            tracing::warn!(topic = %self.settings.topic, error = %err, "autopilot: the fleet topic failed; trying again next window");
        }
    }

    fn set_mode(&self, mode: Mode) {
        let mut st = self.lock();
        if st.mode.as_ref() == Some(&mode) {
            return;
        }
        let was_alone = matches!(st.mode, Some(Mode::Alone(_)));
        match &mode {
            Mode::Alone(why) if !was_alone => {
                tracing::warn!(
                    topic = %self.settings.topic,
                    why = %why,
                    "autopilot: deciding alone: {why} (fleet topic {})",
                    self.settings.topic
                );
            }
            Mode::Shared => tracing::info!(
                topic = %self.settings.topic,
                replica = %self.replica,
                "autopilot: deciding with the fleet through topic {} as replica {}",
                self.settings.topic,
                self.replica
            ),
            _ => {}
        }
        let shared = mode == Mode::Shared;
        st.mode = Some(mode);
        if !shared {
            st.replicas = 1;
        }
        metrics::fleet(shared, st.replicas.max(1));
    }

    /// Takes in records read from the fleet topic: bad ones are skipped (debug), and
    /// at most the cap of topics and [`FLEET_REPLICAS_MAX`] replicas are held. With
    /// `seed`, this replica's own stored figures become its figures (a restart).
    fn fold(&self, st: &mut State, records: Vec<(Vec<u8>, Vec<u8>)>, seed: bool) {
        for (key, value) in records {
            let record = match decode(&key, &value) {
                Ok(record) => record,
                Err(err) => {
                    tracing::debug!(error = %err, "autopilot: skipped a fleet record");
                    continue;
                }
            };
            let topic = match &record {
                FleetRecord::Figures { topic, .. } | FleetRecord::Choice { topic, .. } => topic,
            };
            if !st.view_topics.contains(topic) {
                if st.view_topics.len() >= self.cap {
                    continue;
                }
                st.view_topics.insert(topic.clone());
            }
            if let FleetRecord::Figures {
                replica,
                topic,
                window_end_ms,
                figures,
            } = &record
            {
                if !st.replicas_seen.contains_key(replica)
                    && st.replicas_seen.len() >= FLEET_REPLICAS_MAX
                {
                    continue;
                }
                let seen = st.replicas_seen.entry(replica.clone()).or_default();
                *seen = (*seen).max(*window_end_ms);
                let fresh = now_ms().saturating_sub(*window_end_ms) <= self.stale_ms();
                if seed && fresh && *replica == self.replica && st.own.len() < self.cap {
                    st.own.insert(topic.clone(), figures.clone());
                }
            }
            st.view.fold(record);
        }
    }

    /// Adopts every choice record of another replica newer than the choice held, for
    /// topics an auto rule of `rules` decides; the changes it makes.
    fn adopt(&self, st: &mut State, config: &Config, rules: &PolicySet) -> Vec<Change> {
        let mut changes = Vec::new();
        let records: Vec<(String, kpress_autopilot::ChoiceRecord)> = st
            .view
            .choices()
            .iter()
            .map(|(t, r)| (t.clone(), r.clone()))
            .collect();
        for (topic, record) in records {
            if record.replica == self.replica {
                continue;
            }
            if !rules.auto_decides(&topic) {
                continue;
            }
            let held = st.choices.get(&topic);
            if held.is_some_and(|h| h.decided_ms >= record.decided_ms) {
                continue;
            }
            if held.is_none() && st.choices.len() >= self.cap {
                continue;
            }
            let was = held.map(|h| label(&h.choice.candidate));
            let now = label(&record.choice.candidate);
            if was.as_deref() != Some(now.as_str()) {
                changes.push(Change {
                    topic: topic.clone(),
                    rule: rules
                        .auto_rule(&topic)
                        .map(|(i, _)| rule_name(config, i))
                        .unwrap_or_default(),
                    was: was.unwrap_or_else(|| {
                        rules
                            .auto_rule(&topic)
                            .map_or_else(|| AS_SENT.to_owned(), |(_, p)| initial_label(p))
                    }),
                    now,
                    why: format!("adopted from replica {}", record.replica),
                });
            }
            st.choices.insert(
                topic,
                Held {
                    choice: record.choice,
                    decided_ms: record.decided_ms,
                    from: Some(record.replica),
                },
            );
        }
        changes
    }

    /// Drops the choices of topics no auto rule decides any more; `initial` names what
    /// such a topic gets now.
    fn drop_undecidable(
        &self,
        st: &mut State,
        rules: &PolicySet,
        initial: &dyn Fn(&str) -> String,
    ) -> Vec<Change> {
        let gone: Vec<String> = st
            .choices
            .keys()
            .filter(|t| !rules.auto_decides(t))
            .cloned()
            .collect();
        let mut changes = Vec::new();
        for topic in gone {
            if let Some(held) = st.choices.remove(&topic) {
                changes.push(Change {
                    rule: st
                        .status
                        .get(&topic)
                        .map(|s| s.rule.clone())
                        .unwrap_or_default(),
                    was: label(&held.choice.candidate),
                    now: initial(&topic),
                    why: "no auto rule decides it now (another rule matches first, or its \
                          own compression.type pins it)"
                        .to_owned(),
                    topic: topic.clone(),
                });
            }
            st.status.remove(&topic);
        }
        st.own.retain(|t, _| rules.auto_decides(t));
        changes
    }

    /// The decision step of a window ending at `now` (ms since the epoch): the
    /// records to publish (own figures, changed choices) and the changes made.
    #[allow(clippy::type_complexity)]
    fn step(
        &self,
        st: &mut State,
        config: &Config,
        rules: &PolicySet,
        now: u64,
        shared: bool,
    ) -> (
        (Vec<(Vec<u8>, Vec<u8>)>, Vec<(Vec<u8>, Vec<u8>)>),
        Vec<Change>,
    ) {
        let instant = Instant::now();
        let span_ms = st
            .last_window
            .map_or(0, |(at, _)| instant.duration_since(at).as_millis() as u64);
        st.last_window = Some((instant, now));

        // Own figures: forget, then add the window's. The half-life is in windows of
        // `window_ms`: a window that took longer (a slow fleet topic) forgets more.
        let windows = span_ms as f64 / self.settings.window.as_millis().max(1) as f64;
        let factor = decay_factor(DECAY_HALF_LIFE_WINDOWS_DEFAULT).powf(windows);
        for figures in st.own.values_mut() {
            figures.decay(factor);
            figures.add_span(span_ms);
        }
        for (topic, window) in self.collector.take() {
            if !rules.auto_decides(&topic) {
                continue;
            }
            if !st.own.contains_key(&topic) {
                if st.own.len() >= self.cap {
                    continue;
                }
                let mut fresh = TopicFigures::default();
                fresh.add_span(span_ms);
                st.own.insert(topic.clone(), fresh);
            }
            let own = st.own.get_mut(&topic).expect("inserted above");
            own.add_traffic(window.traffic_bytes);
            own.merge(&window.trials);
        }
        let initial = |topic: &str| {
            rules
                .auto_rule(topic)
                .map_or_else(|| AS_SENT.to_owned(), |(_, p)| initial_label(p))
        };
        let mut changes = self.drop_undecidable(st, rules, &initial);
        // Figures faded to nothing of a topic without a choice go.
        let choices = &st.choices;
        st.own.retain(|topic, f| {
            choices.contains_key(topic)
                || f.traffic_bytes > 0
                || f.candidates.values().any(|c| c.weight >= 1e-3)
        });

        // Merged figures: the fleet's latest per replica, own included.
        let mut figures_out = Vec::new();
        let merged = if shared {
            for (topic, figures) in &st.own {
                let (key, value) = encode_figures(&self.replica, now, topic, figures);
                figures_out.push((key, value));
                st.view.fold(FleetRecord::Figures {
                    replica: self.replica.clone(),
                    topic: topic.clone(),
                    window_end_ms: now,
                    figures: figures.clone(),
                });
                st.view_topics.insert(topic.clone());
            }
            st.replicas_seen.insert(self.replica.clone(), now);
            let since = now.saturating_sub(self.stale_ms());
            st.view.forget_before(since);
            st.replicas_seen.retain(|_, end| *end >= since);
            st.replicas = st.replicas_seen.len().max(1);
            changes.extend(self.adopt(st, config, rules));
            st.view.merged()
        } else {
            st.replicas = 1;
            st.own.clone()
        };
        metrics::fleet(shared, st.replicas);

        // Each auto rule's topics, decided together.
        struct Group<'a> {
            policy: &'a AutoPolicy,
            figures: BTreeMap<String, TopicFigures>,
            previous: BTreeMap<String, Choice>,
        }
        let mut groups: BTreeMap<usize, Group<'_>> = BTreeMap::new();
        let topics: BTreeSet<&String> = merged.keys().chain(st.choices.keys()).collect();
        for topic in topics {
            if !rules.auto_decides(topic) {
                continue;
            }
            let Some((index, policy)) = rules.auto_rule(topic) else {
                continue;
            };
            let group = groups.entry(index).or_insert_with(|| Group {
                policy,
                figures: BTreeMap::new(),
                previous: BTreeMap::new(),
            });
            if let Some(f) = merged.get(topic) {
                group.figures.insert(topic.clone(), f.clone());
            }
            if let Some(held) = st.choices.get(topic) {
                group.previous.insert(topic.clone(), held.choice.clone());
            }
        }
        let mut choices_out = Vec::new();
        for (index, group) in groups {
            let name = rule_name(config, index);
            let settings = engine_settings(group.policy, st.replicas, self.work_slots);
            let decisions = decide(&settings, &group.figures, &group.previous, now);
            let mut used = 0.0;
            for (topic, decision) in decisions {
                used = decision.explanation.budget_used_cores;
                let held = st.choices.get(&topic);
                let was = held.map_or_else(
                    || initial_label(group.policy),
                    |h| label(&h.choice.candidate),
                );
                match decision.choice {
                    None => {
                        if st.choices.remove(&topic).is_some() {
                            changes.push(Change {
                                topic: topic.clone(),
                                rule: name.clone(),
                                was,
                                now: initial_label(group.policy),
                                why: decision.explanation.why.clone(),
                            });
                        }
                    }
                    Some(choice) => {
                        let same = held.is_some_and(|h| h.choice.candidate == choice.candidate);
                        if same {
                            if let Some(h) = st.choices.get_mut(&topic) {
                                h.choice = choice;
                            }
                        } else {
                            changes.push(Change {
                                topic: topic.clone(),
                                rule: name.clone(),
                                was,
                                now: label(&choice.candidate),
                                why: decision.explanation.why.clone(),
                            });
                            if shared {
                                choices_out.push(encode_choice(
                                    &self.replica,
                                    now,
                                    &topic,
                                    &choice,
                                ));
                            }
                            st.choices.insert(
                                topic.clone(),
                                Held {
                                    choice,
                                    decided_ms: now,
                                    from: None,
                                },
                            );
                        }
                    }
                }
                let held = st.choices.get(&topic);
                st.status.insert(
                    topic.clone(),
                    TopicStatus {
                        topic: topic.clone(),
                        rule: name.clone(),
                        choice: held.map(|h| label(&h.choice.candidate)),
                        since_ms: held.map(|h| h.choice.since_ms),
                        adopted_from: held.and_then(|h| h.from.clone()),
                        explanation: decision.explanation,
                    },
                );
            }
            metrics::budget(&name, settings.budget_cores, used);
        }
        for change in &mut changes {
            if change.rule.is_empty() {
                if let Some(status) = st.status.get(&change.topic) {
                    change.rule = status.rule.clone();
                }
            }
        }
        ((figures_out, choices_out), changes)
    }

    /// Makes the choices held what the Produce path reads, logs each change and moves
    /// the gauges.
    fn apply(&self, changes: Vec<Change>) {
        let mut st = self.lock();
        let map: HashMap<Box<str>, Arc<str>> = st
            .choices
            .iter()
            .map(|(topic, held)| {
                (
                    Box::from(topic.as_str()),
                    Arc::from(label(&held.choice.candidate)),
                )
            })
            .collect();
        let current = self.chosen.load();
        if **current != map {
            self.collector.set_decided(map.keys().cloned());
            self.chosen.store(Arc::new(map));
        }
        for change in &changes {
            tracing::info!(
                topic = %change.topic,
                rule = %change.rule,
                choice = %change.now,
                was = %change.was,
                why = %change.why,
                "autopilot: topic {} now {} (was {}): {}",
                change.topic,
                change.now,
                change.was,
                change.why
            );
            metrics::change(&change.topic);
        }
        // Gauges follow the choices held.
        let held: BTreeMap<String, String> = st
            .choices
            .iter()
            .map(|(t, h)| (t.clone(), label(&h.choice.candidate)))
            .collect();
        let gauges = std::mem::take(&mut st.gauges);
        for (topic, old) in &gauges {
            if held.get(topic) != Some(old) {
                metrics::choice(topic, old, false);
            }
        }
        for (topic, new) in &held {
            if gauges.get(topic) != Some(new) {
                metrics::choice(topic, new, true);
            }
        }
        st.gauges = held;
    }

    /// The autopilot as `/policy` shows it.
    pub fn status(&self) -> AutopilotStatus {
        let st = self.lock();
        let mut topics: Vec<TopicStatus> = st.status.values().cloned().collect();
        for status in &mut topics {
            let held = st.choices.get(&status.topic);
            status.choice = held.map(|h| label(&h.choice.candidate));
            status.since_ms = held.map(|h| h.choice.since_ms);
            status.adopted_from = held.and_then(|h| h.from.clone());
        }
        let (shared, alone_because) = match &st.mode {
            Some(Mode::Shared) => (true, None),
            Some(Mode::Alone(why)) => (false, Some(why.clone())),
            None => (false, Some("no window yet".to_owned())),
        };
        AutopilotStatus {
            shared,
            alone_because,
            topic: self.settings.topic.clone(),
            replica: self.replica.clone(),
            replicas: st.replicas.max(1),
            window_ms: self.settings.window.as_millis() as u64,
            last_window_ms: st.last_window.map(|(_, ms)| ms),
            topics,
        }
    }
}

/// The window task's hold on the fleet topic.
pub struct FleetLink {
    connector: Option<ClusterConnector>,
    store: Option<FleetStore>,
    next_try: Option<Instant>,
    denied: bool,
    /// A transient failure was logged and nothing has succeeded since.
    failing: bool,
}

impl std::fmt::Debug for FleetLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetLink")
            .field("store", &self.store)
            .field("denied", &self.denied)
            .finish_non_exhaustive()
    }
}

/// Reads until caught up, at most `reads` times.
async fn read_all(
    store: &mut FleetStore,
    reads: usize,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>, StoreError> {
    let mut out = Vec::new();
    for _ in 0..reads {
        let records = store.read_new().await?;
        let empty = records.is_empty();
        out.extend(records);
        if store.caught_up() || empty {
            break;
        }
    }
    Ok(out)
}

/// `records` in runs of at most [`PUBLISH_CHUNK_BYTES`] (a record larger alone is a
/// run of its own).
fn chunks(records: &[(Vec<u8>, Vec<u8>)]) -> impl Iterator<Item = &[(Vec<u8>, Vec<u8>)]> {
    let mut start = 0;
    std::iter::from_fn(move || {
        if start >= records.len() {
            return None;
        }
        let mut end = start;
        let mut bytes = 0;
        while end < records.len() {
            let size = records[end].0.len() + records[end].1.len();
            if end > start && bytes + size > PUBLISH_CHUNK_BYTES {
                break;
            }
            bytes += size;
            end += 1;
        }
        let run = &records[start..end];
        start = end;
        Some(run)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kpress_batch::{PolicyLookup, Target};
    use kpress_codec::Codec;

    const AUTO: &str = "[[topics]]\nmatch = \"logs.*\"\ncompression.type = \"auto\"\n\
                        auto.candidates = [\"zstd:3\", \"lz4:9\"]\nauto.min_samples = 5\n\
                        auto.max_cores = 1.5\n";

    fn config(rules: &str) -> Config {
        kpress_config::parse(
            &format!(
                "[listener]\nbind = \"127.0.0.1:19092\"\n\
                 [upstream]\nbootstrap_servers = [\"127.0.0.1:9092\"]\n{rules}"
            ),
            "t.toml",
        )
        .unwrap()
    }

    fn alone() -> Arc<Autopilot> {
        let settings = AutopilotSettings {
            share: false,
            ..AutopilotSettings::default()
        };
        Autopilot::new(settings, "here:19092".to_owned(), 100)
    }

    /// `batches` batches of 10 kB as sent (40 kB of records), zstd:3 and lz4:9 writing
    /// them in `zstd` and `lz4` bytes.
    fn feed(pilot: &Autopilot, topic: &str, batches: usize, zstd: u64, lz4: u64) {
        for _ in 0..batches {
            pilot.collector().add_traffic(topic, 10_000, 1);
            pilot.collector().add_batch(
                topic,
                10_000,
                40_000,
                &[("zstd:3", zstd, 200_000), ("lz4:9", lz4, 50_000)],
            );
        }
    }

    fn codec_of(rules: &PolicySet, topic: &str) -> Option<Codec> {
        match &rules.policy_for(topic).target {
            Target::Codec { codec, .. } => Some(*codec),
            _ => None,
        }
    }

    #[tokio::test]
    async fn a_topic_with_samples_gets_a_choice_the_rules_then_resolve() {
        let config = config(AUTO);
        let pilot = alone();
        let source: Arc<dyn AutoChoiceSource> = pilot.clone();
        let rules = PolicySet::with_sources(&config, None, Some(source));
        let mut link = pilot.fleet(None);
        pilot.window(&mut link, &config, &rules).await;
        std::thread::sleep(Duration::from_millis(5));
        // Too few samples: undecided, the rule's initial policy (as sent) applies.
        feed(&pilot, "logs.a", 3, 3000, 5000);
        pilot.window(&mut link, &config, &rules).await;
        assert_eq!(pilot.auto_choice("logs.a"), None);
        assert_eq!(codec_of(&rules, "logs.a"), None);
        feed(&pilot, "logs.a", 10, 3000, 5000);
        // Random bytes: every candidate grows them.
        feed(&pilot, "logs.random", 10, 10_100, 10_050);
        // Not an auto topic (the Produce path would not count it): left out.
        feed(&pilot, "metrics", 10, 3000, 5000);
        pilot.window(&mut link, &config, &rules).await;
        assert_eq!(
            pilot.auto_choice("logs.a").as_deref(),
            Some("zstd:3"),
            "{:#?}",
            pilot.status()
        );
        assert_eq!(codec_of(&rules, "logs.a"), Some(Codec::Zstd));
        assert_eq!(pilot.auto_choice("logs.random").as_deref(), Some(AS_SENT));
        assert_eq!(codec_of(&rules, "logs.random"), None);
        assert_eq!(pilot.auto_choice("metrics"), None);

        let status = pilot.status();
        assert!(!status.shared);
        assert_eq!(
            status.alone_because.as_deref(),
            Some("[autopilot] share = false")
        );
        assert_eq!(status.replicas, 1);
        let topics: Vec<&str> = status.topics.iter().map(|t| t.topic.as_str()).collect();
        assert_eq!(topics, ["logs.a", "logs.random"]);
        let a = &status.topics[0];
        assert_eq!(a.rule, "logs.*");
        assert_eq!(a.choice.as_deref(), Some("zstd:3"));
        assert!(a.since_ms.is_some() && a.adopted_from.is_none());
        assert_eq!(a.explanation.budget_limit_cores, Some(1.5));
        let zstd = a
            .explanation
            .candidates
            .iter()
            .find(|c| c.candidate.as_deref() == Some("zstd:3"))
            .unwrap();
        assert_eq!(zstd.samples, 13);
        assert!((zstd.ratio - 0.3).abs() < 1e-4, "{}", zstd.ratio);

        // A reload that drops the auto rule: the choice goes.
        let plain = self::config("");
        let rules = PolicySet::with_sources(&plain, None, Some(pilot.clone() as _));
        pilot.window(&mut link, &plain, &rules).await;
        assert_eq!(pilot.auto_choice("logs.a"), None);
    }

    #[test]
    fn a_newer_choice_of_another_replica_is_adopted_and_figures_merge() {
        let config = config(AUTO);
        let pilot = Autopilot::new(AutopilotSettings::default(), "here:1".to_owned(), 100);
        let rules = PolicySet::with_sources(&config, None, Some(pilot.clone() as _));
        let now = now_ms();
        let mut theirs = TopicFigures::default();
        theirs.add_traffic(1_000_000);
        theirs.add_span(1000);
        theirs.add_batch(10_000, 40_000, &[("zstd:3", 3000, 9), ("lz4:9", 5000, 9)]);
        let choice = Choice {
            candidate: Some("lz4:9".to_owned()),
            since_ms: now - 10,
            changes: vec![now - 10],
        };
        let records = vec![
            encode_figures("there:1", now - 5, "logs.b", &theirs),
            encode_choice("there:1", now - 10, "logs.b", &choice),
            // Not a record: skipped.
            (b"junk".to_vec(), b"{}".to_vec()),
        ];
        let changes = {
            let mut st = pilot.lock();
            pilot.fold(&mut st, records, false);
            let (out, changes) = pilot.step(&mut st, &config, &rules, now, true);
            // Own figures are published even when there are none of its own: none here.
            assert!(out.0.is_empty() && out.1.is_empty(), "{out:?}");
            assert_eq!(st.replicas, 2);
            changes
        };
        assert_eq!(
            changes,
            [Change {
                topic: "logs.b".to_owned(),
                rule: "logs.*".to_owned(),
                was: AS_SENT.to_owned(),
                now: "lz4:9".to_owned(),
                why: "adopted from replica there:1".to_owned(),
            }]
        );
        pilot.apply(changes);
        assert_eq!(pilot.auto_choice("logs.b").as_deref(), Some("lz4:9"));
        assert_eq!(codec_of(&rules, "logs.b"), Some(Codec::Lz4));
        let status = pilot.status();
        assert_eq!(status.topics[0].adopted_from.as_deref(), Some("there:1"));
        // The budget of a fleet of two is twice the rule's.
        assert_eq!(status.topics[0].explanation.budget_limit_cores, Some(3.0));
        // Its own choice at an older time does not undo the adopted one.
        let older = encode_choice("here:1", now - 1000, "logs.b", &Choice::default());
        let mut st = pilot.lock();
        pilot.fold(&mut st, vec![older], false);
        assert!(pilot.adopt(&mut st, &config, &rules).is_empty());
    }

    #[test]
    fn replicas_exchanging_records_decide_alike() {
        let config = config(AUTO);
        let one = Autopilot::new(AutopilotSettings::default(), "one:1".to_owned(), 100);
        let two = Autopilot::new(AutopilotSettings::default(), "two:1".to_owned(), 100);
        let rules_one = PolicySet::with_sources(&config, None, Some(one.clone() as _));
        let rules_two = PolicySet::with_sources(&config, None, Some(two.clone() as _));
        let now = now_ms();
        // Only `one` sees the topic's traffic.
        let step = |pilot: &Autopilot, rules: &PolicySet, now: u64| {
            let mut st = pilot.lock();
            let (out, changes) = pilot.step(&mut st, &config, rules, now, true);
            drop(st);
            pilot.apply(changes);
            out
        };
        step(&one, &rules_one, now);
        std::thread::sleep(Duration::from_millis(5));
        feed(&one, "logs.a", 10, 3000, 5000);
        let (figures, choices) = step(&one, &rules_one, now + 1000);
        assert_eq!(figures.len(), 1);
        assert_eq!(choices.len(), 1);
        assert_eq!(one.auto_choice("logs.a").as_deref(), Some("zstd:3"));
        // `two` reads them: it merges the figures and takes the choice.
        {
            let mut st = two.lock();
            two.fold(&mut st, [figures, choices].concat(), false);
        }
        let (figures, choices) = step(&two, &rules_two, now + 1500);
        assert!(figures.is_empty(), "no figures of its own");
        assert!(choices.is_empty(), "the same choice is not published again");
        assert_eq!(two.auto_choice("logs.a").as_deref(), Some("zstd:3"));
        let status = two.status();
        assert!(status.topics[0].adopted_from.as_deref() == Some("one:1"));
        assert_eq!(status.replicas, 2);
        // A hostile writer's records: bounded, and garbage is skipped.
        let mut st = two.lock();
        let invented: Vec<_> = (0..FLEET_REPLICAS_MAX + 10)
            .map(|i| {
                encode_figures(
                    &format!("r{i}"),
                    now + 1500,
                    "logs.x",
                    &TopicFigures::default(),
                )
            })
            .collect();
        two.fold(&mut st, invented, false);
        assert_eq!(st.replicas_seen.len(), FLEET_REPLICAS_MAX);
        two.fold(
            &mut st,
            vec![(b"choice/logs.y".to_vec(), vec![0xff; 10])],
            false,
        );
        assert!(st.view.choice("logs.y").is_none());
    }

    #[test]
    fn budgets_scale_with_replicas_and_work_slots() {
        let config = config(
            "[[topics]]\nmatch = \"a\"\ncompression.type = \"auto\"\nauto.max_cores = 1.5\n\
             [[topics]]\nmatch = \"b\"\ncompression.type = \"auto\"\nauto.max_cpu_share = 0.5\n\
             auto.objective = \"cost\"\n\
             [[topics]]\nmatch = \"c\"\ncompression.type = \"auto\"\n",
        );
        let policy = |i: usize| &config.topics[i].policy.auto;
        assert_eq!(engine_settings(policy(0), 2, 4).budget_cores, Some(3.0));
        assert_eq!(engine_settings(policy(1), 3, 4).budget_cores, Some(6.0));
        assert!(matches!(
            engine_settings(policy(1), 1, 4).objective,
            Objective::Cost(_)
        ));
        let c = engine_settings(policy(2), 1, 4);
        assert_eq!(c.budget_cores, None);
        assert_eq!(c.candidates, ["zstd:3", "lz4:9", "gzip:6", "snappy"]);
        assert_eq!(rule_name(&config, 1), "b");
        assert_eq!(rule_name(&config, 3), DEFAULTS_RULE);
    }

    #[test]
    fn publishes_are_cut_into_runs_within_the_chunk_size() {
        let record = |n: usize| (vec![b'k'; 10], vec![b'v'; n]);
        let records = vec![
            record(PUBLISH_CHUNK_BYTES / 2),
            record(PUBLISH_CHUNK_BYTES / 2),
            record(PUBLISH_CHUNK_BYTES * 2),
            record(1),
        ];
        let runs: Vec<usize> = chunks(&records).map(<[_]>::len).collect();
        assert_eq!(runs, [1, 1, 1, 1]);
        let small = vec![record(10); 5];
        assert_eq!(chunks(&small).count(), 1);
        assert_eq!(chunks(&[]).count(), 0);
    }

    #[test]
    fn the_replica_id_ends_in_the_listener_port() {
        assert!(replica_id(19092).ends_with(":19092"));
        assert!(replica_id(19092).len() > ":19092".len());
    }
}
