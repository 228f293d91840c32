#!/usr/bin/env bash
# The load harness: what kpress costs and saves a producer, in one run. Kafka's
# own ProducerPerformance (records from datasets/apache_access.log, acks=1, linger.ms=5,
# batch.size=262144) against a one-node 4.1.1 broker and a release kpress:
#  - direct (lz4, and gzip), through kpress passing batches through, recompressing
#    gzip→zstd-3 and lz4→gzip-6 with the faster of the isal and libdeflate gzip
#    providers (timed first), each as ratios to the direct run with the same producer
#    settings: records/s, MB/s, p50/p99/p99.9 latency (at a fixed rate below
#    saturation), kpress CPU ms per MB of values and peak RSS;
#  - a sequential single-connection probe of ApiVersions and Produce (one 16 KiB lz4
#    batch) straight to the broker against through kpress: the added p50 and p99;
#  - who pays for gzip→zstd-3: the broker's CPU when a compression.type=zstd topic makes
#    it recompress, against kpress's CPU doing it in front of a topic that stores as sent;
#  - the same question in topic mode (topic_mode_offload in tests/load.rs): gzip into
#    zstd topics straight to the broker and through a kpress with no rules, broker CPU
#    ms/MB each way, 4 routes in alternating rounds;
#  - then Kafka's own recompression (a Java MemoryRecords program) against kpress's per
#    core (tests/recompression_vs_java.rs);
#  - then one busy connection's recompression on one core and on two, and throughput
#    and memory with 1/10/100 connections and partitions per request (tests/scaling.rs);
#  - then a noisy neighbour (tests/noisy_neighbour.rs): a light producer's p50/p99/max
#    (ProducerPerformance, gzip, 300 records/s into an lz4 topic) alone and while two
#    kcat producers flood a zstd-19 topic, through kpress, through KPRESS_BASE_BIN if
#    set, and straight to a broker that recompresses by topic configuration; kpress's
#    CPU and the heavy topic's stored bytes;
#  - then consumers (tests/consumers_cost.rs): Kafka's ConsumerPerformance reading
#    1,500,000 lz4 records (batch.size=1048576) straight from the broker and through kpress
#    in alternating rounds: MB/s each way, the ratio, kpress CPU ms per MB fetched;
#  - then the autopilot (tests/autopilot_bench.rs): seven topics of JSON, logs, metrics,
#    gzip'd blobs and random bytes in tiny and large batches, paced through a kpress with
#    compression.type = "auto" and through fixed zstd-3, lz4, gzip-6, snappy and as sent:
#    stored bytes per topic, auto against the best fixed codec in hindsight, kpress CPU
#    seconds, stored bytes per CPU-second, and when each topic's choice settled.
# Targets are printed beside the figures. It measures and never fails on speed; it fails
# if a record is not acknowledged or stored, or a stored batch is not in the route's codec.
# The measurements are the ignored tests `load` (tests/load.rs), `recompression_vs_java`,
# `scaling` and `noisy_neighbour`. Run it when little else runs on the machine.
#
#   scripts/load.sh                      about 49 minutes on 2 cores (10 for load, 3 to 7 for
#                                        recompression_vs_java, about 5 for scaling, about 7
#                                        for noisy_neighbour, 10 with KPRESS_BASE_BIN, about 3
#                                        for consumers_cost, about 13 for autopilot_bench), plus
#                                        release builds
#   LOAD_ROUNDS=5                        rounds of each kind (default 3)
#   LOAD_RECORDS=5000000                 records of a throughput run (default 2000000)
#   LOAD_LATENCY_RATE=20000              records/s of the latency runs (default: a quarter
#                                        of the slowest route's median throughput)
#   LOAD_LATENCY_SECONDS=15              length of a latency run (default 10)
#   LOAD_PROBE_ROUND_TRIPS=5000          round trips of each probe request a round (default 2000)
#   LOAD_REPORT=/path/report.md          also write the whole report there
#   LOAD_RECOMPRESSION=0                 leave out the recompression_vs_java section (built with
#                                        --release: it times kpress's rewrite in its own process)
#   LOAD_SCALING=0                       leave out tests/scaling.rs (one connection on 1 and 2
#                                        cores at SCALING_ZSTD_LEVEL, default 9 here; 1/10/100
#                                        connections and partitions per request)
#   LOAD_TOPIC_MODE=0                    leave out topic_mode_offload (tests/load.rs: gzip into
#                                        zstd topics with and without kpress in topic mode)
#   LOAD_NOISY=0                         leave out the noisy neighbour (NOISY_SECONDS,
#                                        NOISY_ROUNDS, NOISY_ADAPTIVE: tests/noisy_neighbour.rs)
#   LOAD_CONSUMERS=0                     leave out consumers_cost (about 3 minutes;
#                                        CONSUMER_ROUNDS, default 5, CONSUMER_RECORDS)
#   LOAD_AUTOPILOT=0                     leave out autopilot_bench (about 13 minutes;
#                                        AUTOPILOT_SECONDS a route, default 120, and the
#                                        knobs tests/autopilot_bench.rs lists)
#   KPRESS_BIN=/path/to/kpress           measure this release binary instead of building one
#   KPRESS_BASE_BIN=/path/to/kpress      the noisy neighbour measures this build too, side by
#                                        side ("before")
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${LOAD_ROUNDS:-3}
records=${LOAD_RECORDS:-2000000}
# Measured on the 2-core VM: about 1.5 minutes of setup, warm-up and probe, and per round
# 2.5 minutes at 2,000,000 records (the gzip producers' runs dominate).
estimate=$((2 + rounds * 5 * records / 4000000))
echo "load.sh: about ${estimate} minutes for the load test at LOAD_ROUNDS=$rounds LOAD_RECORDS=$records on 2 cores,"
echo "         then 3 to 7 for recompression_vs_java, about 5 for scaling and 7 to 10 for the"
echo "         noisy neighbour, about 3 for consumers, about 7 for the autopilot; plus release builds"

scripts/setup.sh
if [ -z "${KPRESS_BIN:-}" ]; then
  cargo build --release -p kpress --bin kpress
  KPRESS_BIN=$PWD/target/release/kpress
fi
export KPRESS_BIN
work=$(mktemp -d -t kpress-load-XXXXXX)
trap 'rm -rf "$work"' EXIT
status=0

LOAD_REPORT=$work/load.md \
  cargo test -p kpress-tests --test load -- --ignored --exact load --nocapture || status=$?

recompression_note=""
if [ "${LOAD_RECOMPRESSION:-1}" = 0 ]; then
  recompression_note="Recompression per core against Kafka's Java path: left out (LOAD_RECOMPRESSION=0)."
elif [ ! -f tests/recompression_vs_java.rs ]; then
  recompression_note="Recompression per core against Kafka's Java path: skipped, tests/recompression_vs_java.rs does not exist in this checkout."
else
  RECOMPRESSION_REPORT=$work/recompression.md \
    cargo test --release -p kpress-tests --test recompression_vs_java -- --ignored --exact recompression_vs_java --nocapture || status=$?
fi
echo "$recompression_note"

# An optional measurement: unless the variable SWITCH is 0, the ignored test EXACT of
# tests/TEST.rs with its report at $work/NAME.md (the variable REPORT names it) and
# any further VAR=value; left out, the note says so (SUBJECT: left out (SWITCH=0).).
measure() {
  local name=$1 subject=$2 switch=$3 report=$4 test=$5 exact=$6
  shift 6
  if [ "${!switch:-1}" = 0 ]; then
    printf -v "${name}_note" '%s' "$subject: left out ($switch=0)."
    return 0
  fi
  env "$report=$work/$name.md" "$@" \
    cargo test -p kpress-tests --test "$test" -- --ignored --exact "$exact" --nocapture || status=$?
}

# One busy connection on one core and on two, and growth with connections and partitions.
scaling_note=""
measure scaling "Scaling with cores" LOAD_SCALING SCALING_REPORT scaling scaling \
  "SCALING_ZSTD_LEVEL=${SCALING_ZSTD_LEVEL:-9}"

# Topic mode: the broker's CPU for gzip into zstd topics, with and without kpress.
topic_note=""
measure topic "Topic mode offload" LOAD_TOPIC_MODE TOPIC_MODE_REPORT load topic_mode_offload

# A light producer beside a heavy flood: through kpress, KPRESS_BASE_BIN and the broker.
noisy_note=""
if [ -n "${KPRESS_BASE_BIN:-}" ]; then
  export KPRESS_BASE_BIN
fi
measure noisy "Noisy neighbour" LOAD_NOISY NOISY_REPORT noisy_neighbour noisy_neighbour

# Consumers: ConsumerPerformance straight from the broker and through kpress.
consumers_note=""
measure consumers "Consumers through kpress" LOAD_CONSUMERS CONSUMERS_REPORT consumers_cost \
  consumers_through_kpress

# The autopilot against fixed codecs and the best in hindsight, topic by topic.
autopilot_note=""
measure autopilot "Autopilot" LOAD_AUTOPILOT AUTOPILOT_REPORT autopilot_bench autopilot_bench

# A section of the report under "## HEADING": $work/NAME.md, or the note, else that
# TEST left none. With "own", a report carries its own heading.
section() {
  local name=$1 test=$2 heading=$3 own=${4:-} note_var="${1}_note"
  local note=${!note_var}
  if [ -z "$note" ] && [ -s "$work/$name.md" ]; then
    [ -n "$own" ] || printf '## %s\n\n' "$heading"
    cat "$work/$name.md"
  else
    printf '## %s\n\n%s\n' "$heading" "${note:-$test: no report (see the output above)}"
  fi
}

{
  echo "## Load harness (scripts/load.sh)"
  echo
  if [ -s "$work/load.md" ]; then
    cat "$work/load.md"
  else
    echo "load: no report (see the output above)"
  fi
  echo
  section recompression recompression_vs_java "Recompression per core against Kafka's Java path" own
  echo
  section scaling scaling "Scaling with cores"
  echo
  section topic topic_mode_offload "Topic mode offload" own
  echo
  section noisy noisy_neighbour "Noisy neighbour"
  echo
  section consumers consumers_cost "Consumers through kpress"
  echo
  section autopilot autopilot_bench "Autopilot against fixed codecs"
} >"$work/report.md"
echo
cat "$work/report.md"
if [ -n "${LOAD_REPORT:-}" ]; then
  cp "$work/report.md" "$LOAD_REPORT"
fi
exit "$status"
