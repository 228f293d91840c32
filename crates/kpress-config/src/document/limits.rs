//! `[limits]`: sizes, counts and deadlines that bound what one request, one connection
//! and the whole proxy may hold.

use toml::de::DeTable;

use super::{Walk, FILE_START};
use crate::settings::Limits;

pub(super) const KEYS: [&str; 12] = [
    "max_batch_bytes",
    "max_decompressed_bytes",
    "max_frame_bytes",
    "max_inflight_bytes",
    "max_connection_inflight_bytes",
    "max_connections",
    "frame_timeout_ms",
    "idle_timeout_ms",
    "max_request_decompressed_bytes",
    "max_decompression_ratio",
    "max_topic_labels",
    "max_rewrite_wait_ms",
];

/// Kafka sizes are int32 on the wire.
const INT32_MAX: i64 = i32::MAX as i64;

impl Walk<'_> {
    pub(super) fn limits(&mut self, table: &DeTable<'_>) -> Option<Limits> {
        let keys = self.known_keys("limits", table, &KEYS);
        let mut limits = Limits::default();
        let mut ok = true;
        let mut connection_inflight = 0;
        let fields: [(&str, &mut usize, i64, i64); 12] = [
            (
                "max_batch_bytes",
                &mut limits.max_batch_bytes,
                61,
                INT32_MAX,
            ),
            (
                "max_decompressed_bytes",
                &mut limits.max_decompressed_bytes,
                1024,
                INT32_MAX,
            ),
            (
                "max_frame_bytes",
                &mut limits.max_frame_bytes,
                1024,
                INT32_MAX,
            ),
            (
                "max_inflight_bytes",
                &mut limits.max_inflight_bytes,
                2048,
                1 << 40,
            ),
            (
                "max_connection_inflight_bytes",
                &mut connection_inflight,
                1024,
                1 << 40,
            ),
            ("max_connections", &mut limits.max_connections, 1, 1_000_000),
            (
                "frame_timeout_ms",
                &mut limits.frame_timeout_ms,
                100,
                3_600_000,
            ),
            (
                "idle_timeout_ms",
                &mut limits.idle_timeout_ms,
                1000,
                86_400_000,
            ),
            (
                "max_request_decompressed_bytes",
                &mut limits.max_request_decompressed_bytes,
                1 << 20,
                1 << 40,
            ),
            (
                "max_decompression_ratio",
                &mut limits.max_decompression_ratio,
                10,
                1_000_000,
            ),
            ("max_topic_labels", &mut limits.max_topic_labels, 0, 100_000),
            // Below a producer's request.timeout.ms: waiting longer only times it out.
            (
                "max_rewrite_wait_ms",
                &mut limits.max_rewrite_wait_ms,
                1,
                30_000,
            ),
        ];
        for (name, field, min, max) in fields {
            if let Some((_, v)) = keys.get(name) {
                let key = format!("limits.{name}");
                match self.integer_in(&key, v, min, max, &format!("{min}..{max}")) {
                    Some(n) => *field = n as usize,
                    None => ok = false,
                }
            }
        }
        // Unset, one connection may hold one largest frame per direction.
        limits.max_connection_inflight_bytes = if keys.contains_key("max_connection_inflight_bytes")
        {
            connection_inflight
        } else {
            limits.max_frame_bytes
        };
        if ok && limits.max_connection_inflight_bytes < limits.max_frame_bytes {
            let at = keys
                .get("max_connection_inflight_bytes")
                .map_or(FILE_START, |(_, v)| v.span());
            self.sink.bad_value(
                "limits.max_connection_inflight_bytes",
                &at,
                format!(
                    "is below limits.max_frame_bytes ({}): a connection could never read a largest frame",
                    limits.max_frame_bytes
                ),
                Some(format!("{}..{}", limits.max_frame_bytes, 1u64 << 40)),
            );
            ok = false;
        }
        // The proxy gives requests and responses half the budget each: a largest frame
        // must fit in one half or it could never be admitted.
        let needed = limits.max_frame_bytes.saturating_mul(2);
        if ok && limits.max_inflight_bytes < needed {
            let at = keys
                .get("max_inflight_bytes")
                .or_else(|| keys.get("max_frame_bytes"))
                .map_or(FILE_START, |(_, v)| v.span());
            self.sink.bad_value(
                "limits.max_inflight_bytes",
                &at,
                format!(
                    "is below twice limits.max_frame_bytes ({}): half the budget serves requests, half responses, and a largest frame must fit in a half",
                    limits.max_frame_bytes
                ),
                Some(format!("{needed}..{}", 1u64 << 40)),
            );
            ok = false;
        }
        ok.then_some(limits)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{config, one_problem, problems, HEAD};
    use super::KEYS;

    /// Each key with its range, as a problem's "allowed" shows it.
    const RANGES: [(&str, i64, i64); 12] = [
        ("max_batch_bytes", 61, i32::MAX as i64),
        ("max_decompressed_bytes", 1024, i32::MAX as i64),
        ("max_frame_bytes", 1024, i32::MAX as i64),
        ("max_inflight_bytes", 2048, 1 << 40),
        ("max_connection_inflight_bytes", 1024, 1 << 40),
        ("max_connections", 1, 1_000_000),
        ("frame_timeout_ms", 100, 3_600_000),
        ("idle_timeout_ms", 1000, 86_400_000),
        ("max_request_decompressed_bytes", 1 << 20, 1 << 40),
        ("max_decompression_ratio", 10, 1_000_000),
        ("max_topic_labels", 0, 100_000),
        ("max_rewrite_wait_ms", 1, 30_000),
    ];

    fn with(key: &str, value: impl std::fmt::Display) -> String {
        format!("{HEAD}[limits]\n{key} = {value}\n")
    }

    #[test]
    fn every_key_has_a_range() {
        assert_eq!(RANGES.map(|(key, _, _)| key), KEYS);
    }

    #[test]
    fn out_of_range_values_name_key_value_and_range() {
        for (key, min, max) in RANGES {
            let column = key.len() + 4;
            for bad in [min - 1, max + 1] {
                assert_eq!(
                    one_problem(&with(key, bad)),
                    format!(
                        "t.toml:6:{column}: limits.{key} = {bad}: out of range (allowed: {min}..{max})"
                    )
                );
            }
        }
    }

    #[test]
    fn bounds_are_in_range() {
        for (key, min, max) in RANGES {
            for good in [min, max] {
                let out_of_range: Vec<String> = problems(&with(key, good))
                    .into_iter()
                    .filter(|p| p.contains("out of range"))
                    .collect();
                assert!(out_of_range.is_empty(), "{key} = {good}: {out_of_range:?}");
            }
        }
        let c = config(&with("max_batch_bytes", 61));
        assert_eq!(c.limits.max_batch_bytes, 61);
    }

    #[test]
    fn a_value_must_be_an_integer() {
        assert_eq!(
            one_problem(&with("max_connections", "\"10\"")),
            "t.toml:6:19: limits.max_connections = \"10\": must be an integer, not string \
             (allowed: 1..1000000)"
        );
    }

    #[test]
    fn a_connection_holds_one_largest_frame_by_default_and_never_less() {
        let c = config(&with("max_frame_bytes", 4096));
        assert_eq!(c.limits.max_connection_inflight_bytes, 4096);
        assert_eq!(
            one_problem(&format!(
                "{HEAD}[limits]\nmax_frame_bytes = 4096\nmax_connection_inflight_bytes = 2048\n"
            )),
            "t.toml:7:33: limits.max_connection_inflight_bytes = 2048: is below \
             limits.max_frame_bytes (4096): a connection could never read a largest frame \
             (allowed: 4096..1099511627776)"
        );
    }

    #[test]
    fn the_inflight_budget_fits_a_largest_frame_in_each_half() {
        assert_eq!(
            one_problem(&format!(
                "{HEAD}[limits]\nmax_frame_bytes = 4096\nmax_inflight_bytes = 8191\n"
            )),
            "t.toml:7:22: limits.max_inflight_bytes = 8191: is below twice limits.max_frame_bytes \
             (4096): half the budget serves requests, half responses, and a largest frame must \
             fit in a half (allowed: 8192..1099511627776)"
        );
        config(&format!(
            "{HEAD}[limits]\nmax_frame_bytes = 4096\nmax_inflight_bytes = 8192\n"
        ));
        // max_inflight_bytes unset: the problem is at the key that made it.
        let p = one_problem(&with("max_frame_bytes", i32::MAX));
        assert!(
            p.starts_with(&format!(
                "t.toml:6:19: limits.max_inflight_bytes = {}: is below twice",
                i32::MAX
            )),
            "{p}"
        );
    }

    #[test]
    fn an_unknown_key_lists_the_known_ones() {
        assert_eq!(
            one_problem(&with("max_batch_byte", 1)),
            format!(
                "t.toml:6:1: limits.max_batch_byte: unknown key in [limits] (allowed: {}); \
                 did you mean max_batch_bytes?",
                KEYS.join(", ")
            )
        );
    }
}
