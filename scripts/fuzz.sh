#!/usr/bin/env bash
# Coverage-guided fuzzing of kpress's hostile-input paths with cargo-fuzz (libFuzzer,
# nightly). Targets and their invariants: crates/kpress-fuzz; the libFuzzer wrappers:
# fuzz/fuzz_targets. `cargo test -p kpress-fuzz` replays fuzz/corpus and
# fuzz/regressions on stable, so CI checks every saved input without fuzzing.
#
#   scripts/fuzz.sh [SECONDS]     each target for SECONDS (default 60), one after the other
#   scripts/fuzz.sh --jobs 2 600  two targets at a time (the dev machine has 2 cores)
#   scripts/fuzz.sh --targets codec_decode,batch_rewrite 300
#   scripts/fuzz.sh 300 -- -fork=1 -ignore_crashes=1    extra libFuzzer flags after --
#   scripts/fuzz.sh --capture     seed the corpora from real clients and a real broker
#                                 (tests/capture_corpus.rs), then minimize them
#   scripts/fuzz.sh --cmin        minimize every corpus (cargo fuzz cmin)
#
# New corpus entries go into fuzz/corpus/<target>/. A crash, out-of-memory (one
# allocation over 512 MiB, or 2 GiB resident) or timeout (30 s per input) is copied
# into fuzz/regressions/<target>/ and the script exits 1 after every target ran;
# reproducers that are not fixed yet belong in fuzz/pending/<target>/ (not replayed).
# At the end it prints, per target, the executions run and what failed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

ALL_TARGETS=(request_frame response_rewrite codec_decode batch_rewrite policy_parse)
MALLOC_LIMIT_MB=512
RSS_LIMIT_MB=2048
TIMEOUT_S=30
# Corpus files above this are dropped when minimizing: small inputs fuzz faster, and
# the committed corpora stay small.
MAX_SEED_BYTES=$((64 * 1024))

log() { printf '[fuzz] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 2; }

usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

seconds=60
jobs=1
targets=("${ALL_TARGETS[@]}")
mode=run
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage ;;
    --capture) mode=capture ;;
    --cmin) mode=cmin ;;
    --jobs) jobs=${2:?--jobs needs a number}; shift ;;
    --targets) IFS=, read -r -a targets <<<"${2:?--targets needs a list}"; shift ;;
    --) shift; extra=("$@"); break ;;
    *[!0-9]*|'') log "unknown argument: $1"; usage 2 ;;
    *) seconds=$1 ;;
  esac
  shift
done
for t in "${targets[@]}"; do
  [[ " ${ALL_TARGETS[*]} " == *" $t "* ]] || die "unknown target $t (targets: ${ALL_TARGETS[*]})"
done
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "--jobs wants a positive number, not $jobs"

ensure_tools() {
  if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    die "the nightly Rust toolchain is missing (cargo fuzz needs it for libFuzzer and the sanitizers): rustup toolchain install nightly"
  fi
  if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    log "cargo-fuzz is missing: cargo install cargo-fuzz --locked"
    cargo install cargo-fuzz --locked
  fi
}

# Minimizes one corpus on edge coverage alone (-use_counters=0: hit counts would keep
# many inputs per edge), then drops what is over the seed size limit.
minimize() {
  local target=$1 dir=fuzz/corpus/$1
  [ -d "$dir" ] || return 0
  local before
  before=$(find "$dir" -type f | wc -l)
  cargo +nightly fuzz cmin "$target" "$dir" -- -use_counters=0 -rss_limit_mb=$RSS_LIMIT_MB \
    -malloc_limit_mb=$MALLOC_LIMIT_MB -timeout=$TIMEOUT_S >"fuzz/artifacts/$target.cmin.log" 2>&1 ||
    die "cargo fuzz cmin $target failed: fuzz/artifacts/$target.cmin.log"
  find "$dir" -type f -size +${MAX_SEED_BYTES}c -delete
  log "$target: $before -> $(find "$dir" -type f | wc -l) inputs, $(du -sb "$dir" | cut -f1) bytes"
}

policy_seeds() {
  # The shipped policy files, and every policy text the kpress-config tests parse.
  local dir=fuzz/corpus/policy_parse
  mkdir -p "$dir"
  python3 - "$dir" config/*.toml crates/kpress-config/tests/*.rs crates/kpress-config/tests/common/*.rs <<'EOF'
import hashlib, pathlib, re, sys
out = pathlib.Path(sys.argv[1])
texts = []
head = ""
for name in sys.argv[2:]:
    text = pathlib.Path(name).read_text()
    if name.endswith(".toml"):
        texts.append(text)
        continue
    m = re.search(r'const HEAD: &str = r#"(.*?)"#;', text, re.S)
    if m:
        head = m.group(1)
    texts += re.findall(r'r#"(.*?)"#', text, re.S)
    # Ordinary literals holding a line break are policy texts too ("{HEAD}[limits]\n...").
    for literal in re.findall(r'(?<![#\w])"((?:[^"\\]|\\.)*\\n(?:[^"\\]|\\.)*)"', text):
        texts.append(literal.encode().decode("unicode_escape"))
for text in texts:
    # format! arguments: the shared head, and escaped braces.
    text = text.replace("{HEAD}", head).replace("{{", "{").replace("}}", "}")
    data = text.encode()
    (out / hashlib.sha256(data).hexdigest()).write_bytes(data)
EOF
}

case $mode in
  capture)
    ensure_tools
    scripts/setup.sh
    cargo build -p kpress --bin kpress
    cargo test -p kpress-tests --test capture_corpus -- --ignored --nocapture ||
      die "the capture failed (tests/capture_corpus.rs; is its [[test]] entry in tests/Cargo.toml?)"
    policy_seeds
    mkdir -p fuzz/artifacts
    cargo +nightly fuzz build
    for t in "${targets[@]}"; do minimize "$t"; done
    exit 0 ;;
  cmin)
    ensure_tools
    mkdir -p fuzz/artifacts
    cargo +nightly fuzz build
    for t in "${targets[@]}"; do minimize "$t"; done
    exit 0 ;;
esac

ensure_tools
log "building the fuzz targets (nightly, ASan, debug assertions)"
cargo +nightly fuzz build

# Runs one target for the time budget; writes its log to fuzz/artifacts/<target>.log.
run_target() {
  local target=$1
  local artifacts=fuzz/artifacts/$target
  mkdir -p "$artifacts" "fuzz/corpus/$target"
  local marker
  marker=$(mktemp)
  cargo +nightly fuzz run "$target" "fuzz/corpus/$target" -- \
    -max_total_time="$seconds" -rss_limit_mb=$RSS_LIMIT_MB -malloc_limit_mb=$MALLOC_LIMIT_MB \
    -timeout=$TIMEOUT_S -print_final_stats=1 -artifact_prefix="$artifacts/" \
    ${extra[@]+"${extra[@]}"} >"fuzz/artifacts/$target.log" 2>&1 || true
  # Artifacts this run wrote, copied as regressions.
  local found=0 f
  while IFS= read -r -d '' f; do
    mkdir -p "fuzz/regressions/$target"
    cp "$f" "fuzz/regressions/$target/"
    found=$((found + 1))
  done < <(find "$artifacts" -maxdepth 1 -type f -newer "$marker" \
             \( -name 'crash-*' -o -name 'oom-*' -o -name 'timeout-*' -o -name 'leak-*' \) -print0)
  rm -f "$marker"
  echo "$found" >"fuzz/artifacts/$target.found"
}

# Executions run, from libFuzzer's final stats (or fork mode's last status line).
executions() {
  local log=$1 n
  n=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1 || true)
  [ -n "$n" ] || n=$(grep -o '^#[0-9]*' "$log" | tr -d '#' | tail -1 || true)
  [ -n "$n" ] || n=$(grep -o 'Done [0-9]* runs' "$log" | grep -o '[0-9]*' | tail -1 || true)
  echo "${n:-0}"
}

log "fuzzing ${targets[*]} for ${seconds}s each, $jobs at a time"
running=0
for t in "${targets[@]}"; do
  run_target "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

status=0
printf '\n%-18s %14s %9s %9s  %s\n' target executions exec/s failures log
for t in "${targets[@]}"; do
  log_file=fuzz/artifacts/$t.log
  found=$(cat "fuzz/artifacts/$t.found" 2>/dev/null || echo 0)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log_file" | grep -o '[0-9]*$' | tail -1 || true)
  printf '%-18s %14s %9s %9s  %s\n' "$t" "$(executions "$log_file")" "${rate:--}" "$found" "$log_file"
  if [ "$found" -gt 0 ]; then
    status=1
    grep -m1 -E '^(thread .* panicked|==[0-9]+==ERROR|SUMMARY)' "$log_file" | sed 's/^/    /' || true
  fi
done
if [ $status -ne 0 ]; then
  log "failures were copied to fuzz/regressions/<target>/ (reproduce: cargo test -p kpress-fuzz);"
  log "move a reproducer that is not fixed yet to fuzz/pending/<target>/"
fi
exit $status
