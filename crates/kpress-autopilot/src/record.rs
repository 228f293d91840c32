//! Fleet records: what replicas write to the shared compacted topic, and the view
//! folded from what they read back.
//!
//! Keys are `figures/<replica>/<topic>` and `choice/<topic>`; values are JSON objects
//! with a version `v` (now [`RECORD_VERSION`]). Anyone who can write the topic can
//! write anything, so [`decode`] checks sizes first and rejects what it does not
//! understand, without panicking.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::decide::Choice;
use crate::figures::TopicFigures;

/// The version of the records this build writes and reads.
pub const RECORD_VERSION: u32 = 1;
/// The largest value [`decode`] reads.
pub const RECORD_VALUE_MAX: usize = 64 * 1024;
/// The largest key [`decode`] reads (a Kafka topic name is at most 249 bytes).
pub const RECORD_KEY_MAX: usize = 512;

const FIGURES_PREFIX: &str = "figures/";
const CHOICE_PREFIX: &str = "choice/";

/// A record that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("key of {0} bytes is over the {RECORD_KEY_MAX}-byte cap")]
    KeyTooLong(usize),
    #[error("value of {0} bytes is over the {RECORD_VALUE_MAX}-byte cap")]
    ValueTooLong(usize),
    #[error("key {0:?} is neither figures/<replica>/<topic> nor choice/<topic>")]
    BadKey(String),
    #[error("record version {0} is not {RECORD_VERSION}")]
    UnknownVersion(u64),
    #[error("value is not a valid record: {0}")]
    BadValue(String),
    #[error("value names {value:?} but its key {key:?}")]
    Mismatch { key: String, value: String },
}

/// A decoded record.
#[derive(Debug, Clone, PartialEq)]
pub enum FleetRecord {
    /// A replica's (decayed, cumulative) figures of a topic at the end of a window.
    Figures {
        replica: String,
        topic: String,
        window_end_ms: u64,
        figures: TopicFigures,
    },
    /// A replica's decision for a topic.
    Choice {
        replica: String,
        topic: String,
        decided_ms: u64,
        choice: Choice,
    },
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FiguresValue {
    v: u32,
    replica: String,
    topic: String,
    window_end_ms: u64,
    figures: TopicFigures,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChoiceValue {
    v: u32,
    replica: String,
    topic: String,
    decided_ms: u64,
    choice: Choice,
}

#[derive(Deserialize)]
struct Version {
    v: u64,
}

/// The key and value of a replica's figures of `topic`. `topic` must be a Kafka topic
/// name (no `/`); `replica` may be any string.
pub fn encode_figures(
    replica: &str,
    window_end_ms: u64,
    topic: &str,
    figures: &TopicFigures,
) -> (Vec<u8>, Vec<u8>) {
    let key = format!("{FIGURES_PREFIX}{replica}/{topic}").into_bytes();
    let value = FiguresValue {
        v: RECORD_VERSION,
        replica: replica.to_owned(),
        topic: topic.to_owned(),
        window_end_ms,
        figures: figures.clone(),
    };
    (key, to_json(&value))
}

/// The key and value of `replica`'s choice for `topic`, decided at `decided_ms`.
pub fn encode_choice(
    replica: &str,
    decided_ms: u64,
    topic: &str,
    choice: &Choice,
) -> (Vec<u8>, Vec<u8>) {
    let key = format!("{CHOICE_PREFIX}{topic}").into_bytes();
    let value = ChoiceValue {
        v: RECORD_VERSION,
        replica: replica.to_owned(),
        topic: topic.to_owned(),
        decided_ms,
        choice: choice.clone(),
    };
    (key, to_json(&value))
}

fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    // Plain structs of strings, numbers and maps with string keys: serialization
    // cannot fail (non-finite floats are written as null, which decode rejects).
    serde_json::to_vec(value).unwrap_or_default()
}

/// Reads one record of the fleet topic.
pub fn decode(key: &[u8], value: &[u8]) -> Result<FleetRecord, RecordError> {
    if key.len() > RECORD_KEY_MAX {
        return Err(RecordError::KeyTooLong(key.len()));
    }
    if value.len() > RECORD_VALUE_MAX {
        return Err(RecordError::ValueTooLong(value.len()));
    }
    let key = std::str::from_utf8(key)
        .map_err(|_| RecordError::BadKey(String::from_utf8_lossy(key).into_owned()))?;
    let bad_key = || RecordError::BadKey(key.to_owned());
    let version: Version =
        serde_json::from_slice(value).map_err(|e| RecordError::BadValue(e.to_string()))?;
    if version.v != u64::from(RECORD_VERSION) {
        return Err(RecordError::UnknownVersion(version.v));
    }
    if let Some(rest) = key.strip_prefix(FIGURES_PREFIX) {
        // Topic names have no '/', replica names may.
        let (replica, topic) = rest.rsplit_once('/').ok_or_else(bad_key)?;
        if replica.is_empty() || !valid_topic(topic) {
            return Err(bad_key());
        }
        let v: FiguresValue =
            serde_json::from_slice(value).map_err(|e| RecordError::BadValue(e.to_string()))?;
        check_names(key, replica, topic, &v.replica, &v.topic)?;
        if !v.figures.is_sane() {
            return Err(RecordError::BadValue(
                "negative or non-finite figures".to_owned(),
            ));
        }
        Ok(FleetRecord::Figures {
            replica: v.replica,
            topic: v.topic,
            window_end_ms: v.window_end_ms,
            figures: v.figures,
        })
    } else if let Some(topic) = key.strip_prefix(CHOICE_PREFIX) {
        if !valid_topic(topic) {
            return Err(bad_key());
        }
        let v: ChoiceValue =
            serde_json::from_slice(value).map_err(|e| RecordError::BadValue(e.to_string()))?;
        if v.topic != topic {
            return Err(RecordError::Mismatch {
                key: key.to_owned(),
                value: v.topic,
            });
        }
        Ok(FleetRecord::Choice {
            replica: v.replica,
            topic: v.topic,
            decided_ms: v.decided_ms,
            choice: v.choice,
        })
    } else {
        Err(bad_key())
    }
}

fn check_names(
    key: &str,
    replica: &str,
    topic: &str,
    value_replica: &str,
    value_topic: &str,
) -> Result<(), RecordError> {
    if replica != value_replica || topic != value_topic {
        return Err(RecordError::Mismatch {
            key: key.to_owned(),
            value: format!("{value_replica}/{value_topic}"),
        });
    }
    Ok(())
}

/// Kafka's topic name rule: 1 to 249 of `[a-zA-Z0-9._-]`.
fn valid_topic(topic: &str) -> bool {
    !topic.is_empty()
        && topic.len() <= 249
        && topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The latest choice record of a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChoiceRecord {
    pub replica: String,
    pub decided_ms: u64,
    pub choice: Choice,
}

/// What the fleet's records say: the latest figures of each replica per topic and the
/// latest choice per topic. The same records give the same view in any order, except
/// figures of one replica and topic with equal `window_end_ms` (the first folded
/// stays; a replica writes one record per window).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FleetView {
    /// topic → replica → (window end, figures).
    figures: BTreeMap<String, BTreeMap<String, (u64, TopicFigures)>>,
    choices: BTreeMap<String, ChoiceRecord>,
}

impl FleetView {
    pub fn new() -> FleetView {
        FleetView::default()
    }

    /// Takes in one record, keeping it only if newer than what the view holds.
    pub fn fold(&mut self, record: FleetRecord) {
        match record {
            FleetRecord::Figures {
                replica,
                topic,
                window_end_ms,
                figures,
            } => {
                let slot = self.figures.entry(topic).or_default().entry(replica);
                match slot {
                    std::collections::btree_map::Entry::Vacant(v) => {
                        v.insert((window_end_ms, figures));
                    }
                    std::collections::btree_map::Entry::Occupied(mut o) => {
                        if window_end_ms > o.get().0 {
                            o.insert((window_end_ms, figures));
                        }
                    }
                }
            }
            FleetRecord::Choice {
                replica,
                topic,
                decided_ms,
                choice,
            } => {
                let newer = self
                    .choices
                    .get(&topic)
                    .is_none_or(|held| (decided_ms, &replica) > (held.decided_ms, &held.replica));
                if newer {
                    self.choices.insert(
                        topic,
                        ChoiceRecord {
                            replica,
                            decided_ms,
                            choice,
                        },
                    );
                }
            }
        }
    }

    /// Drops figures whose window ended before `min_window_end_ms` (replicas gone
    /// from the fleet).
    pub fn forget_before(&mut self, min_window_end_ms: u64) {
        for replicas in self.figures.values_mut() {
            replicas.retain(|_, (end, _)| *end >= min_window_end_ms);
        }
        self.figures.retain(|_, replicas| !replicas.is_empty());
    }

    /// Per topic, the sum of each replica's latest figures, added in replica order.
    pub fn merged(&self) -> BTreeMap<String, TopicFigures> {
        self.figures
            .iter()
            .map(|(topic, replicas)| {
                let mut sum = TopicFigures::default();
                for (_, figures) in replicas.values() {
                    sum.merge(figures);
                }
                (topic.clone(), sum)
            })
            .collect()
    }

    /// The latest choice record of `topic`.
    pub fn choice(&self, topic: &str) -> Option<&ChoiceRecord> {
        self.choices.get(topic)
    }

    /// Every topic's latest choice record.
    pub fn choices(&self) -> &BTreeMap<String, ChoiceRecord> {
        &self.choices
    }
}
