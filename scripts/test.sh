#!/usr/bin/env bash
# kpress's test suite, what CI (.ci/run) and CONTRIBUTING.md call. Two tiers, named in
# .config/nextest.toml (crates/kpress/tests/test_tiers.rs keeps every test binary in one):
#  - hermetic: every test outside kpress-tests; needs only Rust and a C compiler.
#  - real: kpress-tests, against real Kafka brokers and real clients; needs what
#    scripts/setup.sh installs and caches (Kafka jars, Java test clients, kcat,
#    confluent-kafka, helm, buildah, QATzip, ISA-L).
#
#   scripts/test.sh                 setup, then every test of both tiers (CI)
#   scripts/test.sh hermetic [ARGS] the hermetic tier, no setup
#   scripts/test.sh real [ARGS]     setup, then the real tier
#   scripts/test.sh list            each tier's test binaries
#   scripts/test.sh ARGS...         setup, then `cargo test ARGS...`
#
# ARGS go to `cargo test`, e.g. `scripts/test.sh real --test metrics -- NAME --exact`.
# KPRESS_KEEP_LOGS=1 keeps the brokers' and proxies' temp dirs (logs) for inspection.
set -euo pipefail
cd "$(dirname "$0")/.."

# The binary ids a tier's default-filter lists in .config/nextest.toml.
tier_binaries() {
  awk -v header="[profile.$1]" '$0 == header { on = 1; next } /^\[/ { on = 0 } on' .config/nextest.toml |
    grep -o 'binary_id([^)]*)' | sed 's/^binary_id(\(.*\))$/  \1/'
}

# The integration tests run the kpress binary; build it first so the tests find it
# without building it themselves.
build_kpress() {
  cargo build -p kpress --bin kpress
}

case ${1:-} in
  hermetic)
    shift
    exec cargo test --workspace --exclude kpress-tests --no-fail-fast "$@"
    ;;
  real)
    shift
    scripts/setup.sh
    build_kpress
    exec cargo test -p kpress-tests --no-fail-fast "$@"
    ;;
  list)
    echo "hermetic (scripts/test.sh hermetic; cargo test --workspace --exclude kpress-tests):"
    tier_binaries hermetic
    echo "real (scripts/test.sh real; cargo test -p kpress-tests, after scripts/setup.sh):"
    tier_binaries real
    echo "Tests of one binary: cargo test -p PACKAGE --test NAME -- --list"
    ;;
  "")
    scripts/setup.sh
    build_kpress
    # Every test binary runs even after one fails, so a run reports all failures.
    exec cargo test --workspace --no-fail-fast
    ;;
  *)
    scripts/setup.sh
    build_kpress
    exec cargo test "$@"
    ;;
esac
