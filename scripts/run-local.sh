#!/usr/bin/env bash
# Starts a one-node Apache Kafka (KRaft) on 127.0.0.1:9092 and kpress in front of it on
# 127.0.0.1:19092, prints how to point a producer at kpress, and stops both on Ctrl-C.
#
#   scripts/run-local.sh                 with config/kpress.toml
#   scripts/run-local.sh my-policy.toml  with another policy (its upstream must be 127.0.0.1:9092)
#
# Kafka's jars are fetched from Maven Central on first use and cached under .cache/kafka;
# the broker's data stays under .cache/local-broker/ between runs (delete it to start
# over). KPRESS_PROFILE=debug builds kpress without optimizations (faster to build,
# much slower to compress).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=scripts/versions.sh
. scripts/versions.sh

CONFIG=${1:-config/kpress.toml}
PROFILE=${KPRESS_PROFILE:-release}
BROKER_PORT=9092
CONTROLLER_PORT=9093
BROKER_DIR=$ROOT/.cache/local-broker
LIBS=$ROOT/.cache/kafka/$KAFKA_VERSION/libs

log() { printf '[run-local] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_for_port() { # port, pid that must stay alive, what, seconds
  local port=$1 pid=$2 what=$3 deadline=$((SECONDS + $4))
  until port_open "$port"; do
    kill -0 "$pid" 2>/dev/null || return 1
    [ $SECONDS -lt $deadline ] || die "$what did not listen on port $port within $4 s"
    sleep 0.5
  done
}

[ -f "$CONFIG" ] || die "no policy file $CONFIG"
port_taken() { # port
  die "127.0.0.1:$1 is already in use (another broker or kpress running?): stop it ('ss -ltnp sport = :$1' names the process), then run $0 again"
}
for port in $BROKER_PORT $CONTROLLER_PORT; do
  port_open "$port" && port_taken "$port"
done
command -v java >/dev/null || die "java not found (Java 17 is needed for Kafka)"

scripts/setup.sh kafka

# Build first: a bad policy file should stop us before a broker is started for nothing.
log "building kpress ($PROFILE)"
if [ "$PROFILE" = release ]; then
  cargo build --quiet --release -p kpress --bin kpress
  KPRESS=$ROOT/target/release/kpress
else
  cargo build --quiet -p kpress --bin kpress
  KPRESS=$ROOT/target/debug/kpress
fi
summary=$("$KPRESS" check-config "$CONFIG") || die "fix $CONFIG first (kpress check-config $CONFIG)"
# Where the policy listens: the summary's "  listen IP:PORT (advertised as HOST, …" line.
KPRESS_PORT=$(sed -n 's/^  listen [^ ]*:\([0-9]*\) (advertised as .*/\1/p' <<<"$summary")
KPRESS_HOST=$(sed -n 's/^  listen [^ ]* (advertised as \([^,]*\),.*/\1/p' <<<"$summary")
[ -n "$KPRESS_PORT" ] && [ -n "$KPRESS_HOST" ] || die "cannot find where $CONFIG listens in: $summary"
KPRESS_BOOTSTRAP=$KPRESS_HOST:$KPRESS_PORT
port_open "$KPRESS_PORT" && port_taken "$KPRESS_PORT"

KAFKA_PID=
KPRESS_PID=
stop() {
  trap - INT TERM EXIT
  if [ -n "$KPRESS_PID" ] && kill -0 "$KPRESS_PID" 2>/dev/null; then
    log "stopping kpress (pid $KPRESS_PID)"
    kill -TERM "$KPRESS_PID" 2>/dev/null || true
    wait "$KPRESS_PID" 2>/dev/null || true
  fi
  if [ -n "$KAFKA_PID" ] && kill -0 "$KAFKA_PID" 2>/dev/null; then
    log "stopping Kafka (pid $KAFKA_PID)"
    kill -TERM "$KAFKA_PID" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$KAFKA_PID" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$KAFKA_PID" 2>/dev/null || true
    wait "$KAFKA_PID" 2>/dev/null || true
  fi
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$BROKER_DIR"
cat >"$BROKER_DIR/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$BROKER_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$BROKER_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$BROKER_DIR/data
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
cat >"$BROKER_DIR/log4j2.properties" <<EOF
rootLogger.level=INFO
rootLogger.appenderRef.file.ref=file
appender.file.type=File
appender.file.name=file
appender.file.fileName=$BROKER_DIR/server.log
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%d] %p %m (%c)%n
EOF
JAVA=(java -Xms256m -Xmx768m -Dlog4j2.configurationFile="$BROKER_DIR/log4j2.properties" -cp "$LIBS/*")

if [ ! -f "$BROKER_DIR/data/meta.properties" ]; then
  log "formatting the broker's storage in $BROKER_DIR/data (first run)"
  cluster_id=$("${JAVA[@]}" kafka.tools.StorageTool random-uuid)
  "${JAVA[@]}" kafka.tools.StorageTool format -t "$cluster_id" -c "$BROKER_DIR/server.properties" >/dev/null
fi

log "starting Apache Kafka $KAFKA_VERSION on 127.0.0.1:$BROKER_PORT (log: $BROKER_DIR/server.log)"
"${JAVA[@]}" kafka.Kafka "$BROKER_DIR/server.properties" >>"$BROKER_DIR/server.log" 2>&1 &
KAFKA_PID=$!
wait_for_port $BROKER_PORT "$KAFKA_PID" Kafka 120 ||
  die "Kafka exited at startup; see $BROKER_DIR/server.log"

log "starting kpress on $KPRESS_BOOTSTRAP with $CONFIG"
"$KPRESS" run --config "$CONFIG" &
KPRESS_PID=$!
wait_for_port "$KPRESS_PORT" "$KPRESS_PID" kpress 60 ||
  die "kpress exited at startup (its messages are above)"

cat >&2 <<EOF

  kpress is in front of Kafka. Point producers at it:   bootstrap.servers=$KPRESS_BOOTSTRAP
  (the broker itself is on 127.0.0.1:$BROKER_PORT; with $CONFIG, topics logs.* are stored
  as zstd and metrics.* as lz4, whatever codec the producer used)

  librdkafka (kcat):
    seq 1 1000 | sed 's/^/hello from kcat /' | kcat -P -b $KPRESS_BOOTSTRAP -t logs.app -z gzip
    kcat -C -b $KPRESS_BOOTSTRAP -t logs.app -e -o beginning

  Java (kafka-clients $KAFKA_VERSION):
    java -cp '$LIBS/*' org.apache.kafka.tools.ProducerPerformance \\
      --topic logs.app --num-records 100000 --record-size 200 --throughput -1 \\
      --producer-props bootstrap.servers=$KPRESS_BOOTSTRAP compression.type=gzip linger.ms=20 batch.size=1048576

  What the broker stored (codec per batch):
    java -cp '$LIBS/*' kafka.tools.DumpLogSegments --deep-iteration \\
      --files $BROKER_DIR/data/logs.app-0/00000000000000000000.log | grep -o 'compresscodec: [a-z]*' | sort | uniq -c

  Metrics:  curl -s http://127.0.0.1:9464/metrics | grep ^kpress   (if $CONFIG has [admin])

  Ctrl-C stops kpress and Kafka.

EOF

# Whichever stops first ends the run; the trap stops the other.
set +e
wait -n "$KAFKA_PID" "$KPRESS_PID"
status=$?
set -e
if ! kill -0 "$KAFKA_PID" 2>/dev/null; then
  log "Kafka exited ($status); see $BROKER_DIR/server.log"
else
  log "kpress exited ($status)"
fi
exit "$status"
