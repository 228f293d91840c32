#!/usr/bin/env bash
# Installs everything kpress's tests, benches and local runs need, on a fresh Debian
# bookworm machine of the project's kind. Idempotent: a second run only checks.
# Downloads are cached under .cache/ (ignored by git).
#
#   scripts/setup.sh            all of it
#   scripts/setup.sh kafka      only the Kafka jars (what `scripts/run-local.sh` needs)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=$ROOT/.cache
mkdir -p "$CACHE"
# shellcheck source=scripts/versions.sh
. scripts/versions.sh

log() { printf '[setup] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
need() { command -v "$1" >/dev/null || die "$1 not found: $2"; }

apt_updated=0
apt_install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ $apt_updated -eq 0 ]; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null ||
      die "apt-get update failed (its errors are above): run as root with access to the Debian mirrors, or install ${missing[*]} yourself and run $0 again"
    apt_updated=1
  fi
  log "apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null ||
    die "apt-get install ${missing[*]} failed (its errors are above): install them yourself, then run $0 again"
}

# Kafka jars for one version: broker, tools and a log4j binding, from Maven Central.
kafka_jars() {
  local ver=$1 dir=$CACHE/kafka/$1
  [ -f "$dir/.complete" ] && return 0
  log "fetching Apache Kafka $ver jars from Maven Central"
  need mvn "install Maven (apt-get install maven) to fetch Kafka's jars"
  mkdir -p "$dir/libs"
  local binding
  case $ver in
    3.*) binding='<dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>1.7.36</version></dependency>' ;;
    *) binding='<dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.24.3</version></dependency>' ;;
  esac
  cat >"$dir/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kpress.cache</groupId><artifactId>kafka-$ver</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$ver</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$ver</version></dependency>
    $binding
  </dependencies>
</project>
POM
  mvn -q -B -Dstyle.color=never -f "$dir/pom.xml" -Dmaven.repo.local="$CACHE/m2" \
    dependency:copy-dependencies -DoutputDirectory="$dir/libs" >&2 ||
    die "Maven could not fetch Kafka $ver's jars into $dir/libs (its errors are above): check access to Maven Central (a proxy goes in ~/.m2/settings.xml), then run $0 again"
  touch "$dir/.complete"
}

# Only Java kafka-clients of one version (no broker) and a log binding, in the same
# layout as kafka_jars, so the harness runs it like any other version's client.
kafka_client_jars() {
  local ver=$1 dir=$CACHE/kafka/$1
  [ -f "$dir/.complete" ] && return 0
  log "fetching Java kafka-clients $ver from Maven Central"
  need mvn "install Maven (apt-get install maven) to fetch kafka-clients"
  mkdir -p "$dir/libs"
  cat >"$dir/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kpress.cache</groupId><artifactId>kafka-clients-$ver</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-clients</artifactId><version>$ver</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>1.7.36</version></dependency>
  </dependencies>
</project>
POM
  mvn -q -B -Dstyle.color=never -f "$dir/pom.xml" -Dmaven.repo.local="$CACHE/m2" \
    dependency:copy-dependencies -DoutputDirectory="$dir/libs" >&2 ||
    die "Maven could not fetch kafka-clients $ver into $dir/libs (its errors are above): check access to Maven Central (a proxy goes in ~/.m2/settings.xml), then run $0 again"
  touch "$dir/.complete"
}

# Our Java test clients (tests/java, or another source dir), compiled against a Kafka
# version's kafka-clients.
java_clients() {
  local ver=$1 src=${2:-tests/java} out=$CACHE/kafka/$1/test-clients
  local stamp
  stamp=$(cat "$src"/*.java | sha256sum | cut -c1-16)
  [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$stamp" ] && return 0
  log "compiling Java test clients ($src) against kafka-clients $ver"
  need javac "install a JDK 17 or later (apt-get install openjdk-17-jdk-headless)"
  rm -rf "$out" && mkdir -p "$out"
  javac -nowarn -d "$out" -cp "$CACHE/kafka/$ver/libs/*" "$src"/*.java ||
    die "$src does not compile against kafka-clients $ver (errors above)"
  echo "$stamp" >"$out/.stamp"
}

python_clients() {
  local venv=$CACHE/venv
  if [ ! -x "$venv/bin/python" ]; then
    log "creating Python venv for confluent-kafka"
    python3 -m venv "$venv" ||
      die "python3 -m venv failed (errors above): install python3-venv, delete $venv, then run $0 again"
  fi
  "$venv/bin/python" -c "import confluent_kafka" 2>/dev/null && return 0
  log "pip install confluent-kafka==$CONFLUENT_KAFKA_VERSION"
  "$venv/bin/pip" install -q "confluent-kafka==$CONFLUENT_KAFKA_VERSION" >&2 ||
    die "pip could not install confluent-kafka==$CONFLUENT_KAFKA_VERSION into $venv (errors above): check access to PyPI (PIP_INDEX_URL for a mirror), then run $0 again"
}

# KafkaJS from the npm registry into .cache/node (no codec plug-ins, so it reads gzip
# only), for tests/node's consumer.
node_clients() {
  local dir=$CACHE/node
  [ "$(node -p 'require(process.argv[1]).version' "$dir/node_modules/kafkajs/package.json" 2>/dev/null)" = "$KAFKAJS_VERSION" ] && return 0
  command -v node >/dev/null && command -v npm >/dev/null || apt_install nodejs npm
  need node "install Node.js 14 or later for KafkaJS"
  need npm "install npm to fetch KafkaJS"
  log "npm install kafkajs@$KAFKAJS_VERSION into $dir"
  mkdir -p "$dir"
  npm install --prefix "$dir" --save-exact --no-audit --no-fund --loglevel=error "kafkajs@$KAFKAJS_VERSION" >&2 ||
    die "npm could not install kafkajs@$KAFKAJS_VERSION into $dir (errors above): check access to the npm registry (npm config set registry for a mirror), then run $0 again"
}

# The real QATzip library from Debian trixie, unpacked into .cache/qatzip/root without
# touching the system: the same library a QAT host installs, run in its software backup.
qatzip() {
  local dir=$CACHE/qatzip
  [ -f "$dir/.complete" ] && return 0
  log "fetching QATzip (Debian trixie packages) into $dir"
  mkdir -p "$dir/lists/partial" "$dir/debs" "$dir/root"
  local uri keyring
  local sources=/etc/apt/sources.list.d/debian.sources
  uri=$(awk '/^URIs:/{print $2; exit}' "$sources" 2>/dev/null) || true
  keyring=$(awk '/^Signed-By:/{print $2; exit}' "$sources" 2>/dev/null) || true
  [ -n "$uri" ] && [ -n "$keyring" ] ||
    die "no Debian mirror (URIs:, Signed-By:) in $sources to fetch QATzip from: on another system, install libqatzip3 and libqatzip-dev yourself"
  echo "deb [signed-by=$keyring] $uri trixie main" >"$dir/sources.list"
  local opts=(-o APT::Sandbox::User=root -o "Dir::Etc::SourceList=$dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache::archives=$dir/debs")
  apt-get "${opts[@]}" update -qq >/dev/null ||
    die "apt-get update of Debian trixie's lists for QATzip failed (errors above): check access to $uri, then run $0 again"
  (cd "$dir/debs" && apt-get "${opts[@]}" download libqatzip3 libqatzip-dev libqat4 libusdm0 >/dev/null) ||
    die "apt-get download of QATzip's packages failed (errors above): check access to $uri, then run $0 again"
  for deb in "$dir"/debs/*.deb; do dpkg -x "$deb" "$dir/root"; done
  [ -f "$dir/root/usr/include/qatzip.h" ] ||
    die "QATzip's packages unpacked without usr/include/qatzip.h: delete $dir and run $0 again"
  touch "$dir/.complete"
}

# helm, built from source (it is a Go module) into .cache/go/bin, with Go's module and
# build caches under .cache/go too so CI keeps them; and kubernetes-validate (which
# ships the Kubernetes schemas and validates offline) in the tests' venv. For
# tests/deploy.rs. A cold `go install` of helm takes minutes; a warm cache, seconds.
helm_tool() {
  local go_dir=$CACHE/go
  # helm built by `go install` reports only its minor version: a stamp records the pin.
  [ -x "$go_dir/bin/helm" ] && [ "$(cat "$go_dir/bin/.helm-version" 2>/dev/null)" = "$HELM_VERSION" ] && return 0
  need go "install Go 1.24 or later (https://go.dev/dl/) to build helm $HELM_VERSION"
  log "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION into $go_dir/bin"
  GOPATH=$go_dir GOMODCACHE=$go_dir/mod GOCACHE=$go_dir/build GOBIN=$go_dir/bin GOFLAGS="-buildvcs=false -modcacherw" \
    go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2 ||
    die "go install of helm $HELM_VERSION failed (errors above): check access to the Go module proxy (GOPROXY), then run $0 again"
  echo "$HELM_VERSION" >"$go_dir/bin/.helm-version"
}

# The Go modules of tests/go-msk-signer (AWS's SigV4 presigner), which tests/msk_signer.rs
# builds offline to compare kpress's MSK IAM tokens with, byte for byte.
go_msk_signer_modules() {
  local go_dir=$CACHE/go
  need go "install Go 1.24 or later (https://go.dev/dl/) for tests/go-msk-signer"
  log "go mod download for tests/go-msk-signer into $go_dir/mod"
  (cd "$ROOT/tests/go-msk-signer" &&
    GOPATH=$go_dir GOMODCACHE=$go_dir/mod GOCACHE=$go_dir/build GOFLAGS="-buildvcs=false -modcacherw" \
      go mod download >&2) ||
    die "go mod download for tests/go-msk-signer failed (errors above): check access to the Go module proxy (GOPROXY), then run $0 again"
}

kubernetes_validate() {
  local venv=$CACHE/venv
  [ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("kubernetes-validate"))' 2>/dev/null)" = "$KUBERNETES_VALIDATE_VERSION" ] && return 0
  log "pip install kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
  "$venv/bin/pip" install -q "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" >&2 ||
    die "pip could not install kubernetes-validate==$KUBERNETES_VALIDATE_VERSION into $venv (errors above): check access to PyPI (PIP_INDEX_URL for a mirror), then run $0 again"
}

# buildah and mmdebstrap from Debian, and a minbase Debian root file system in
# .cache/container/, from which tests/container.rs builds the debian:bookworm-slim base
# image locally (registry images cannot be pulled here).
container_tools() {
  apt_install buildah mmdebstrap
  local dir=$CACHE/container tar=$CACHE/container/$CONTAINER_BASE_SUITE-minbase.tar
  [ -f "$tar" ] && return 0
  log "mmdebstrap --variant=minbase $CONTAINER_BASE_SUITE into $tar"
  # Anything else at these paths is a failed earlier attempt.
  rm -rf "$tar" "$tar.partial"
  mkdir -p "$dir"
  # --format: mmdebstrap otherwise picks the format from the name, and `.partial` is a
  # directory to it.
  mmdebstrap --quiet --variant=minbase --format=tar "$CONTAINER_BASE_SUITE" "$tar.partial" >&2 ||
    die "mmdebstrap of $CONTAINER_BASE_SUITE failed (errors above): it needs root and the Debian mirrors; delete $tar.partial and run $0 again"
  mv "$tar.partial" "$tar"
}

what=${1:-all}
case $what in
  kafka)
    kafka_jars "$KAFKA_VERSION"
    ;;
  all)
    # Building helm is the longest step on a cold cache (minutes of CPU): it runs beside
    # the downloads below.
    helm_tool &
    helm_build=$!
    apt_install kcat libclang-dev pkg-config
    # ISA-L is an optional accelerator: kpress builds without it and runs without it
    # (the isal gzip provider is then listed unavailable). The tests and benches use
    # its runtime library (libisal2), and isal-sys regenerates its committed bindings
    # from libisal-dev's header with bindgen (libclang-dev).
    apt_install libisal2 libisal-dev
    kafka_jars "$KAFKA_VERSION"
    kafka_jars "$KAFKA_OLD_VERSION"
    kafka_client_jars "$KAFKA_CLIENTS_PRE_ZSTD_VERSION"
    if compgen -G "tests/java/*.java" >/dev/null; then
      java_clients "$KAFKA_VERSION"
      java_clients "$KAFKA_OLD_VERSION"
    fi
    # tests/java needs kafka-clients 3.1+; tests/java-old is the same command line
    # (produce, consume) written against the 2.0 API.
    if compgen -G "tests/java-old/*.java" >/dev/null; then
      java_clients "$KAFKA_CLIENTS_PRE_ZSTD_VERSION" tests/java-old
    fi
    python_clients
    node_clients
    qatzip
    container_tools
    go_msk_signer_modules
    wait "$helm_build" || die "building helm failed (its errors are above)"
    kubernetes_validate
    ;;
  *) echo "usage: $0 [all|kafka]" >&2; exit 2 ;;
esac
log "ok"
