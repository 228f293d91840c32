//! What a rule does under overload: the level ladder its adaptive steps walk, and the
//! controller that decides, window by window, when to step down and back up.
//!
//! The controller is pure (it is fed each window's figures and answers a step or
//! none), so its hysteresis is tested with synthetic windows, never with clocks.

use std::time::Duration;

use kpress_codec::options::{GZIP_LEVEL, LZ4_LEVEL, ZSTD_LEVEL};
use kpress_codec::{Codec, CompressionOptions};

/// The codec options that are levels, one per codec that has levels.
pub const LEVEL_KEYS: [&str; 3] = [GZIP_LEVEL, LZ4_LEVEL, ZSTD_LEVEL];

/// Consecutive pressured windows before a rule steps down one notch.
pub const STEP_DOWN_AFTER: u32 = 3;
/// Consecutive calm windows before a rule steps back up one notch: slower than down,
/// so a rule that just stepped down stays there while the load that caused it may
/// still come back.
pub const STEP_UP_AFTER: u32 = 5;

/// zstd's notches: below 3 the ratio falls off fast; above 19 levels cost several
/// times more for little.
const ZSTD_NOTCHES: [i32; 8] = [19, 16, 13, 10, 7, 5, 3, 1];
/// gzip: every level is a notch.
const GZIP_NOTCHES: [i32; 9] = [9, 8, 7, 6, 5, 4, 3, 2, 1];
/// lz4: level 9 is the fast compressor, every other level LZ4 HC, which costs more
/// than it at any level: the ladder of an HC level ends at 9.
const LZ4_NOTCHES: [i32; 5] = [17, 14, 12, 10, 9];
/// lz4's fast compressor, where its ladder ends.
const LZ4_FAST: i32 = 9;

/// The level option of `codec`, if it has levels.
pub fn level_key(codec: Codec) -> Option<&'static str> {
    match codec {
        Codec::Gzip => Some(GZIP_LEVEL),
        Codec::Lz4 => Some(LZ4_LEVEL),
        Codec::Zstd => Some(ZSTD_LEVEL),
        Codec::None | Codec::Snappy => None,
    }
}

/// The level `options` give `codec`, gzip's -1 read as zlib's 6.
pub fn level_of(codec: Codec, options: &CompressionOptions) -> Option<i32> {
    match codec {
        Codec::Gzip => Some(options.gzip_effective_level() as i32),
        Codec::Lz4 => Some(options.lz4_level()),
        Codec::Zstd => Some(options.zstd_level()),
        Codec::None | Codec::Snappy => None,
    }
}

/// Kafka's level range of `codec` (KIP-390), gzip's -1 aside.
pub fn level_range(codec: Codec) -> Option<(i32, i32)> {
    match codec {
        Codec::Gzip => Some((1, 9)),
        Codec::Lz4 => Some((1, 17)),
        Codec::Zstd => Some((-131_072, 22)),
        Codec::None | Codec::Snappy => None,
    }
}

/// The levels adaptive steps walk for `codec` at `level`, highest (the configured
/// level) first: the codec's notches below `level` and not below `min_level`, then
/// `min_level` itself if no notch is. `min_level` is clipped into the codec's range
/// and to `level`; `None` is the bottom of the codec's notches. Codecs without levels
/// have none.
pub fn ladder(codec: Codec, level: i32, min_level: Option<i32>) -> Vec<i32> {
    let (notches, bottom): (&[i32], i32) = match codec {
        Codec::Zstd => (&ZSTD_NOTCHES, 1),
        Codec::Gzip => (&GZIP_NOTCHES, 1),
        // An HC level below 9 has nothing cheaper but the fast compressor, 9, above it.
        Codec::Lz4 if level < LZ4_FAST => return vec![level],
        Codec::Lz4 => (&LZ4_NOTCHES, LZ4_FAST),
        Codec::None | Codec::Snappy => return Vec::new(),
    };
    let (lowest, _) = level_range(codec).expect("a codec with levels");
    let mut min = min_level.unwrap_or(bottom).clamp(lowest, level);
    if codec == Codec::Lz4 {
        min = min.max(LZ4_FAST);
    }
    let mut out = vec![level];
    out.extend(notches.iter().copied().filter(|n| *n < level && *n >= min));
    if *out.last().expect("level") > min {
        out.push(min);
    }
    out
}

/// One evaluation window of a rule: its rewrites' waits for a work slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    /// Rewrites that got a slot, and their waits summed.
    pub waits: u64,
    pub waited: Duration,
    /// Requests that gave up waiting (the deadline passed).
    pub misses: u64,
}

/// How a window went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A deadline was missed, or the mean wait was above the target.
    Pressured,
    /// No miss and a mean wait below half the target.
    Calm,
    /// No rewrite at all: no sign of load, but no sign that a pressure seen between
    /// sparse requests is gone either.
    Idle,
    /// Between: neither streak goes on.
    Neither,
}

impl Window {
    pub fn mean_wait(&self) -> Duration {
        match u32::try_from(self.waits) {
            Ok(0) => Duration::ZERO,
            Ok(n) => self.waited / n,
            Err(_) => self.waited / u32::MAX,
        }
    }

    pub fn verdict(&self, target: Duration) -> Verdict {
        let mean = self.mean_wait();
        if self.misses == 0 && self.waits == 0 {
            Verdict::Idle
        } else if self.misses > 0 || mean > target {
            Verdict::Pressured
        } else if mean < target / 2 {
            Verdict::Calm
        } else {
            Verdict::Neither
        }
    }
}

/// Why a rule's level changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepReason {
    /// Pressured windows in a row, the last of which missed deadlines.
    Missed { windows: u32, misses: u64 },
    /// Pressured windows in a row, the last with this mean wait.
    SlowWaits { windows: u32, mean_wait: Duration },
    /// Calm windows in a row.
    Calm { windows: u32 },
}

impl std::fmt::Display for StepReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepReason::Missed { windows, misses } => write!(
                f,
                "{windows} pressured windows in a row; in the last, {misses} requests waited past max_rewrite_wait_ms"
            ),
            StepReason::SlowWaits { windows, mean_wait } => write!(
                f,
                "{windows} pressured windows in a row; the last had a mean wait of {} ms",
                mean_wait.as_millis()
            ),
            StepReason::Calm { windows } => write!(f, "{windows} calm windows in a row"),
        }
    }
}

/// One rule's streaks of pressured and calm windows: a rule steps down one notch
/// after [`STEP_DOWN_AFTER`] pressured windows in a row and back up one after
/// [`STEP_UP_AFTER`] calm ones, each streak starting over after a step or a window of
/// another kind, so alternating windows never move it. An idle window (no rewrite of
/// the rule's topics) counts towards calm but does not end a pressured streak: a
/// producer whose requests each miss the deadline may send fewer than one per window,
/// and once the load is gone every window is idle, so the level comes back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stepper {
    pressured: u32,
    calm: u32,
}

impl Stepper {
    /// Takes one window's figures for a rule at `notch` (0: its configured level) of a
    /// ladder of `notches`; the new notch and why, when it changes.
    pub fn window(
        &mut self,
        window: &Window,
        target: Duration,
        notch: usize,
        notches: usize,
    ) -> Option<(usize, StepReason)> {
        match window.verdict(target) {
            Verdict::Pressured => {
                self.calm = 0;
                self.pressured = self.pressured.saturating_add(1);
                if self.pressured < STEP_DOWN_AFTER || notch + 1 >= notches {
                    return None;
                }
                let windows = std::mem::take(&mut self.pressured);
                let reason = if window.misses > 0 {
                    StepReason::Missed {
                        windows,
                        misses: window.misses,
                    }
                } else {
                    StepReason::SlowWaits {
                        windows,
                        mean_wait: window.mean_wait(),
                    }
                };
                Some((notch + 1, reason))
            }
            verdict @ (Verdict::Calm | Verdict::Idle) => {
                if verdict == Verdict::Calm {
                    self.pressured = 0;
                }
                self.calm = self.calm.saturating_add(1);
                if self.calm < STEP_UP_AFTER || notch == 0 {
                    return None;
                }
                let windows = std::mem::take(&mut self.calm);
                Some((notch - 1, StepReason::Calm { windows }))
            }
            Verdict::Neither => {
                *self = Stepper::default();
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ladders_are_clipped_to_the_level_and_the_minimum() {
        assert_eq!(ladder(Codec::Zstd, 19, Some(3)), [19, 16, 13, 10, 7, 5, 3]);
        assert_eq!(ladder(Codec::Zstd, 19, None), [19, 16, 13, 10, 7, 5, 3, 1]);
        assert_eq!(ladder(Codec::Zstd, 22, Some(15)), [22, 19, 16, 15]);
        assert_eq!(ladder(Codec::Zstd, 12, Some(2)), [12, 10, 7, 5, 3, 2]);
        assert_eq!(ladder(Codec::Zstd, 3, Some(-5)), [3, 1, -5]);
        // A minimum above the level is the level: no step.
        assert_eq!(ladder(Codec::Zstd, 3, Some(9)), [3]);
        assert_eq!(ladder(Codec::Gzip, 6, Some(4)), [6, 5, 4]);
        assert_eq!(ladder(Codec::Lz4, 17, None), [17, 14, 12, 10, 9]);
        assert_eq!(ladder(Codec::Lz4, 13, Some(1)), [13, 12, 10, 9]);
        assert_eq!(ladder(Codec::Lz4, 9, None), [9]);
        assert_eq!(ladder(Codec::Lz4, 4, Some(1)), [4]);
        assert!(ladder(Codec::Snappy, 0, None).is_empty());
    }

    const TARGET: Duration = Duration::from_millis(100);

    fn pressured() -> Window {
        Window {
            waits: 10,
            waited: Duration::from_millis(2000),
            misses: 0,
        }
    }

    fn missed() -> Window {
        Window {
            misses: 1,
            ..Window::default()
        }
    }

    fn calm() -> Window {
        Window {
            waits: 10,
            waited: Duration::from_millis(100),
            misses: 0,
        }
    }

    fn between() -> Window {
        Window {
            waits: 10,
            waited: Duration::from_millis(700),
            misses: 0,
        }
    }

    /// Feeds `windows` to a stepper on a ladder of `notches` from `notch`; the notch
    /// after each window.
    fn run(windows: &[Window], notch: usize, notches: usize) -> Vec<usize> {
        let mut stepper = Stepper::default();
        let mut notch = notch;
        windows
            .iter()
            .map(|w| {
                if let Some((next, _)) = stepper.window(w, TARGET, notch, notches) {
                    assert_eq!(next.abs_diff(notch), 1, "one notch at a time");
                    notch = next;
                }
                notch
            })
            .collect()
    }

    #[test]
    fn windows_are_judged_by_misses_and_mean_wait() {
        assert_eq!(pressured().verdict(TARGET), Verdict::Pressured);
        assert_eq!(missed().verdict(TARGET), Verdict::Pressured);
        assert_eq!(calm().verdict(TARGET), Verdict::Calm);
        assert_eq!(Window::default().verdict(TARGET), Verdict::Idle);
        assert_eq!(between().verdict(TARGET), Verdict::Neither);
    }

    #[test]
    fn sustained_pressure_steps_down_one_notch_per_streak_to_the_bottom() {
        let windows = vec![pressured(); 12];
        assert_eq!(run(&windows, 0, 3), [0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2]);
        let mut stepper = Stepper::default();
        stepper.window(&missed(), TARGET, 0, 3);
        stepper.window(&missed(), TARGET, 0, 3);
        let (_, why) = stepper.window(&missed(), TARGET, 0, 3).unwrap();
        assert_eq!(
            why,
            StepReason::Missed {
                windows: 3,
                misses: 1
            }
        );
    }

    #[test]
    fn calm_steps_back_up_to_the_configured_level_and_no_further() {
        let mut windows = vec![calm(); 11];
        windows.push(Window::default());
        assert_eq!(run(&windows, 2, 3), [2, 2, 2, 2, 1, 1, 1, 1, 1, 0, 0, 0]);
    }

    #[test]
    fn alternating_windows_never_move_the_level() {
        let alternating: Vec<Window> = (0..40)
            .map(|i| if i % 2 == 0 { pressured() } else { calm() })
            .collect();
        assert!(run(&alternating, 1, 3).iter().all(|n| *n == 1));
        // Two pressured then a calm one, over and over: no streak reaches three.
        let pattern: Vec<Window> = (0..40)
            .map(|i| if i % 3 == 2 { calm() } else { missed() })
            .collect();
        assert!(run(&pattern, 1, 3).iter().all(|n| *n == 1));
        // A window between pressured and calm breaks either streak.
        let broken: Vec<Window> = (0..40)
            .map(|i| match i % 4 {
                3 => between(),
                _ => calm(),
            })
            .collect();
        assert!(run(&broken, 1, 3).iter().all(|n| *n == 1));
    }

    #[test]
    fn idle_windows_between_sparse_misses_keep_the_pressure_and_bring_the_level_back() {
        let idle = Window::default();
        // A miss every other window: pressure goes on through the idle windows.
        let sparse: Vec<Window> = (0..6)
            .map(|i| if i % 2 == 0 { missed() } else { idle })
            .collect();
        assert_eq!(run(&sparse, 0, 3), [0, 0, 0, 0, 1, 1]);
        // The load gone, only idle windows: back up one notch per five.
        let mut after = sparse.clone();
        after.extend(vec![idle; 10]);
        assert_eq!(*run(&after, 0, 3).last().unwrap(), 0);
        // A calm window with rewrites ends the pressured streak; an idle one does not.
        let broken = [
            missed(),
            missed(),
            calm(),
            missed(),
            missed(),
            idle,
            missed(),
        ];
        assert_eq!(run(&broken, 0, 3), [0, 0, 0, 0, 0, 0, 1]);
    }

    #[test]
    fn a_single_notch_ladder_never_steps() {
        assert!(run(&vec![missed(); 10], 0, 1).iter().all(|n| *n == 0));
        assert!(run(&vec![calm(); 10], 0, 1).iter().all(|n| *n == 0));
    }
}
