# kpress on a slim Debian with ISA-L's runtime library (libisal2), which kpress opens at
# run time for `compression.gzip.provider = "isal"`. The binary links no accelerator
# library: without libisal2 it still runs, listing the isal provider unavailable.
# Every command below runs from the repository root, the build context.
#
# With network, the default target builds the release binary in a Rust stage:
#   docker build --build-arg REVISION=$(git rev-parse HEAD) -t kpress .
# With a binary built on the host (Debian bookworm or a glibc as old), the `runtime`
# target copies it in instead, and needs no Rust toolchain or crates.io:
#   cargo build --release --locked -p kpress
#   docker build --target runtime --build-arg KPRESS_BINARY=target/release/kpress --build-arg REVISION=$(git rev-parse HEAD) -t kpress .
#   buildah bud --format docker --target runtime --build-arg KPRESS_BINARY=target/release/kpress --build-arg REVISION=$(git rev-parse HEAD) -t kpress .
# (the docker format keeps the HEALTHCHECK, which OCI images cannot carry). A debug
# build (`cargo build -p kpress`) goes in as KPRESS_BINARY=target/debug/kpress; no
# other path under target/ is in the context (.dockerignore).
#
# Labels (OCI annotations): title, description, licenses, and from build args
# source (SOURCE, the repository), version (VERSION, the workspace version) and
# revision (REVISION, the git commit). The build stops if VERSION is not what the
# binary's `kpress --version` prints, so the label always names the binary inside.
#
# QATzip (Intel QAT, `compression.gzip.provider = "qat"`) is loaded at run time when
# present: `--build-arg QATZIP=true` adds libqatzip3 with libqat4 and libusdm0. Bookworm
# has no QATzip, and trixie's packages would drag in trixie's libc through apt, so
# their files are unpacked (dpkg-deb -x) over bookworm's libraries, which satisfy them.
#
# The shipped /etc/kpress/kpress.toml listens on 127.0.0.1 and expects a broker on
# 127.0.0.1:9092, both inside the container: mount a policy of your own with
# bind = "0.0.0.0:19092" (and [admin] bind = "0.0.0.0:9464"), advertised_host = the
# name clients reach the host by, and brokers the container can reach; then publish
# the bootstrap and node ports (node_port_base + each broker's node id), e.g.
#   docker run -v $PWD/my.toml:/etc/kpress/kpress.toml:ro \
#     -p 19092:19092 -p 19101-19103:19101-19103 -p 9464:9464 kpress
# (`docker run … kpress check-config /etc/kpress/kpress.toml` checks it first.)
# Pushing to a registry, and the chart's image.repository/image.tag: docs/deploy.md.
# Kubernetes and Helm: deploy/.

# The labels' build args; a stage sees them once it names them again.
ARG SOURCE=https://github.com/kpress/kpress
ARG VERSION=0.1.0
ARG REVISION=unknown

# Only Rust and a C compiler: ISA-L and QATzip are opened at run time, their bindings
# are committed with isal-sys and qat-sys.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p kpress

FROM debian:bookworm-slim AS base
ARG QATZIP=false
RUN set -eu; \
    apt-get update; \
    apt-get install -y --no-install-recommends libisal2 ca-certificates; \
    case "$QATZIP" in \
      true) \
        apt-get install -y --no-install-recommends liblz4-1 libnuma1 zlib1g libssl3; \
        echo 'deb http://deb.debian.org/debian trixie main' >/etc/apt/sources.list.d/trixie.list; \
        apt-get update; \
        cd /tmp; \
        apt-get download libqatzip3/trixie libqat4/trixie libusdm0/trixie; \
        for deb in /tmp/*.deb; do dpkg-deb -x "$deb" /; done; \
        rm /tmp/*.deb /etc/apt/sources.list.d/trixie.list; \
        ldconfig ;; \
      false) ;; \
      *) echo "QATZIP must be true or false, not $QATZIP" >&2; exit 1 ;; \
    esac; \
    rm -rf /var/lib/apt/lists/*
COPY config/ /etc/kpress/
# After the packages, so a new revision reuses their layer.
ARG SOURCE
ARG VERSION
ARG REVISION
LABEL org.opencontainers.image.title="kpress" \
      org.opencontainers.image.description="Kafka-compatible proxy that recompresses produced record batches per topic" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="$SOURCE" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION"
USER nobody
EXPOSE 19092 9464
# The admin endpoint of the shipped policy; a policy with another [admin] bind needs
# its own `--health-cmd`. Kubernetes ignores this and probes /healthz and /readyz itself.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/kpress", "healthcheck", "http://127.0.0.1:9464/healthz"]
ENTRYPOINT ["/usr/local/bin/kpress"]
CMD ["run", "--config", "/etc/kpress/kpress.toml"]

# A binary built on the host, from the build context.
FROM base AS runtime
ARG KPRESS_BINARY=target/release/kpress
COPY ${KPRESS_BINARY} /usr/local/bin/kpress
ARG VERSION
RUN v=$(/usr/local/bin/kpress --version) && [ "$v" = "kpress $VERSION" ] || \
    { echo "kpress --version printed \"$v\", the VERSION build arg says $VERSION" >&2; exit 1; }

# The default target: the binary the build stage compiled.
FROM base AS release
COPY --from=build /src/target/release/kpress /usr/local/bin/kpress
ARG VERSION
RUN v=$(/usr/local/bin/kpress --version) && [ "$v" = "kpress $VERSION" ] || \
    { echo "kpress --version printed \"$v\", the VERSION build arg says $VERSION" >&2; exit 1; }
