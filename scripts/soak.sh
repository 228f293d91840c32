#!/usr/bin/env bash
# A soak of `kpress run` (release build) in front of a real Kafka 4.1.1 broker: two
# idempotent acks=all Java producers (lz4 and gzip) write steadily through kpress into
# zstd-policy topics (every batch recompressed), then everything is read back through
# kpress. Reports records sent and read back (equal), errors (0) and kpress's RSS at
# start, after warm-up, at the end and at its peak, sampled every 5 s from
# /proc/<pid>/status. Fails (exit non-zero) if records differ, errors > 0, or memory
# breaks its bounds:
#   end RSS  <= 1.25 x RSS after warm-up + 32 MiB                       (flat)
#   peak RSS <= the README's "Peak memory" formula at the default limits, T = W = CPUs,
#               zstd level 3 the only compressor (about 1360 MiB on 2 CPUs)
# The soak itself is the ignored test `soak` in tests/faults.rs.
#
#   scripts/soak.sh                      about 10 minutes (540 s of producing)
#   SOAK_SECONDS=120 scripts/soak.sh     shorter or longer
#   SOAK_RATE=20000 scripts/soak.sh      records per second, both producers together (default 10000)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cargo build --release -p kpress --bin kpress
report=$(mktemp -t kpress-soak-XXXXXX.txt)
status=0
KPRESS_BIN=$PWD/target/release/kpress SOAK_REPORT=$report \
  cargo test -p kpress-tests --test faults -- --ignored --exact soak --nocapture || status=$?
echo
if [ -s "$report" ]; then
  cat "$report"
else
  echo "soak: no report (the soak stopped before reading back; see the output above)"
fi
rm -f "$report"
if [ "$status" -ne 0 ]; then
  echo "soak: FAILED"
else
  echo "soak: passed"
fi
exit "$status"
