//! The autopilot's engine: which codec each topic of an auto rule gets, from what
//! shadow trials measured, within a CPU budget. Pure: no I/O, no clock, no threads.
//!
//! TODO module docs
mod decide;
mod figures;
mod record;

pub use decide::{
    decide, CandidateExplanation, Choice, Decision, Explanation, Ineligible, Objective, Prices,
    Settings, DECAY_HALF_LIFE_WINDOWS_DEFAULT, EXACT_SEARCH_MAX,
};
pub use figures::{decay_factor, pair_key, CandidateFigures, PairFigures, TopicFigures};
pub use record::{
    decode, encode_choice, encode_figures, ChoiceRecord, FleetRecord, FleetView, RecordError,
    RECORD_KEY_MAX, RECORD_VALUE_MAX, RECORD_VERSION,
};
