#!/usr/bin/env bash
# kpress's test suite, what CI and the README call: installs/caches everything
# (scripts/setup.sh: Kafka jars, Java test clients, kcat, confluent-kafka, QATzip),
# then runs every test of the workspace, the integration tests against real Kafka
# brokers and real clients included.
#
#   scripts/test.sh                 everything
#   scripts/test.sh -p kpress-tests extra arguments go to `cargo test`
#
# KPRESS_KEEP_LOGS=1 keeps the brokers' and proxies' temp dirs (logs) for inspection.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh

if [ $# -eq 0 ]; then
  # Every test binary runs even after one fails, so a run reports all failures.
  set -- --workspace --no-fail-fast
fi
# The integration tests run the kpress binary; build it first so the tests find it
# without building it themselves.
cargo build -p kpress --bin kpress
exec cargo test "$@"
