#!/usr/bin/env bash
# What TLS through kpress costs a producer: Kafka's ProducerPerformance against a
# one-node 4.1.1 broker, SSL straight to the broker against SSL through a release
# kpress (`[listener.tls]` and `[upstream.tls]`, every batch relayed untouched), and
# the same in plaintext to tell proxying from TLS. Same records (datasets/
# apache_access.log), lz4, acks=1, linger.ms=5, batch.size=262144. Prints a markdown
# table of medians: records/s and MB/s against direct, p50/p99/average latency and
# what kpress adds, kpress's CPU seconds per run and its peak RSS. It measures and
# never fails on speed; it fails if a record is not acknowledged or kpress rewrote a
# batch. The measurement is the ignored test `tls_overhead` in tests/tls_overhead.rs.
# Run it when little else runs on the machine.
#
#   scripts/tls-overhead.sh                          about 12 minutes on 2 cores
#   TLS_OVERHEAD_ROUNDS=5 scripts/tls-overhead.sh    rounds of each kind (default 3)
#   TLS_OVERHEAD_RECORDS=2000000                     records of a throughput run (default 5000000)
#   TLS_OVERHEAD_LATENCY_RATE=40000                  records/s of the latency runs (default: a
#                                                    quarter of the slowest route's median throughput)
#   TLS_OVERHEAD_LATENCY_SECONDS=15                  length of a latency run (default 15)
#   TLS_OVERHEAD_PLAINTEXT=0                         the two TLS routes only
#   KPRESS_BIN=/path/to/kpress                       measure this release binary instead of building one
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
if [ -z "${KPRESS_BIN:-}" ]; then
  cargo build --release -p kpress --bin kpress
  KPRESS_BIN=$PWD/target/release/kpress
fi
report=$(mktemp -t kpress-tls-overhead-XXXXXX.md)
status=0
KPRESS_BIN=$KPRESS_BIN TLS_OVERHEAD_REPORT=$report \
  cargo test -p kpress-tests --test tls_overhead -- --ignored --exact tls_overhead --nocapture || status=$?
echo
if [ -s "$report" ]; then
  cat "$report"
else
  echo "tls-overhead: no report (see the output above)"
fi
rm -f "$report"
exit "$status"
