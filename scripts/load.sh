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
#    in alternating rounds: MB/s each way, the ratio, kpress CPU ms per MB fetched.
# Targets are printed beside the figures. It measures and never fails on speed; it fails
# if a record is not acknowledged or stored, or a stored batch is not in the route's codec.
# The measurements are the ignored tests `load` (tests/load.rs), `recompression_vs_java`,
# `scaling` and `noisy_neighbour`. Run it when little else runs on the machine.
#
#   scripts/load.sh                      about 35 minutes on 2 cores (10 for load, 3 to 7 for
#                                        recompression_vs_java, about 5 for scaling, about 7
#                                        for noisy_neighbour, 10 with KPRESS_BASE_BIN, about 3
#                                        for consumers_cost), plus release builds
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
echo "         noisy neighbour, about 3 for consumers; plus release builds"

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

# One busy connection on one core and on two, and growth with connections and partitions.
scaling_note=""
if [ "${LOAD_SCALING:-1}" = 0 ]; then
  scaling_note="Scaling with cores: left out (LOAD_SCALING=0)."
else
  SCALING_ZSTD_LEVEL=${SCALING_ZSTD_LEVEL:-9} SCALING_REPORT=$work/scaling.md \
    cargo test -p kpress-tests --test scaling -- --ignored --exact scaling --nocapture || status=$?
fi

# Topic mode: the broker's CPU for gzip into zstd topics, with and without kpress.
topic_note=""
if [ "${LOAD_TOPIC_MODE:-1}" = 0 ]; then
  topic_note="Topic mode offload: left out (LOAD_TOPIC_MODE=0)."
else
  TOPIC_MODE_REPORT=$work/topic.md \
    cargo test -p kpress-tests --test load -- --ignored --exact topic_mode_offload --nocapture || status=$?
fi

# A light producer beside a heavy flood: through kpress, KPRESS_BASE_BIN and the broker.
noisy_note=""
if [ "${LOAD_NOISY:-1}" = 0 ]; then
  noisy_note="Noisy neighbour: left out (LOAD_NOISY=0)."
else
  if [ -n "${KPRESS_BASE_BIN:-}" ]; then
    export KPRESS_BASE_BIN
  fi
  NOISY_REPORT=$work/noisy.md \
    cargo test -p kpress-tests --test noisy_neighbour -- --ignored --exact noisy_neighbour --nocapture || status=$?
fi

# Consumers: ConsumerPerformance straight from the broker and through kpress.
consumers_note=""
if [ "${LOAD_CONSUMERS:-1}" = 0 ]; then
  consumers_note="Consumers through kpress: left out (LOAD_CONSUMERS=0)."
else
  CONSUMERS_REPORT=$work/consumers.md \
    cargo test -p kpress-tests --test consumers_cost -- --ignored --exact consumers_through_kpress --nocapture || status=$?
fi

{
  echo "## Load harness (scripts/load.sh)"
  echo
  if [ -s "$work/load.md" ]; then
    cat "$work/load.md"
  else
    echo "load: no report (see the output above)"
  fi
  echo
  if [ -z "$recompression_note" ] && [ -s "$work/recompression.md" ]; then
    cat "$work/recompression.md"
  else
    echo "## Recompression per core against Kafka's Java path"
    echo
    echo "${recompression_note:-recompression_vs_java: no report (see the output above)}"
  fi
  echo
  echo "## Scaling with cores"
  echo
  if [ -z "$scaling_note" ] && [ -s "$work/scaling.md" ]; then
    cat "$work/scaling.md"
  else
    echo "${scaling_note:-scaling: no report (see the output above)}"
  fi
  echo
  if [ -z "$topic_note" ] && [ -s "$work/topic.md" ]; then
    cat "$work/topic.md"
  else
    echo "## Topic mode offload"
    echo
    echo "${topic_note:-topic_mode_offload: no report (see the output above)}"
  fi
  echo
  echo "## Noisy neighbour"
  echo
  if [ -z "$noisy_note" ] && [ -s "$work/noisy.md" ]; then
    cat "$work/noisy.md"
  else
    echo "${noisy_note:-noisy_neighbour: no report (see the output above)}"
  fi
  echo
  echo "## Consumers through kpress"
  echo
  if [ -z "$consumers_note" ] && [ -s "$work/consumers.md" ]; then
    cat "$work/consumers.md"
  else
    echo "${consumers_note:-consumers_cost: no report (see the output above)}"
  fi
} >"$work/report.md"
echo
cat "$work/report.md"
if [ -n "${LOAD_REPORT:-}" ]; then
  cp "$work/report.md" "$LOAD_REPORT"
fi
exit "$status"
