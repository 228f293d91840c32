# kpress: build the release binary, then ship it on a slim Debian with the runtime
# libraries its codecs link (ISA-L). QATzip is loaded at run time when present; mount
# or install it (libqatzip3) in a derived image for QAT hosts.
#
# The shipped /etc/kpress/kpress.toml listens on 127.0.0.1 and expects a broker on
# 127.0.0.1:9092, both inside the container: mount a policy of your own with
# bind = "0.0.0.0:19092" (and [metrics] bind = "0.0.0.0:9464"), advertised_host = the
# name clients reach the host by, and brokers the container can reach; then publish
# the bootstrap and node ports (node_port_base + each broker's node id), e.g.
#   docker run -v $PWD/my.toml:/etc/kpress/kpress.toml:ro \
#     -p 19092:19092 -p 19101-19103:19101-19103 -p 9464:9464 kpress
# (`docker run … kpress check-config /etc/kpress/kpress.toml` checks it first.)
FROM rust:1-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends libisal-dev libclang-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p kpress

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libisal2 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/kpress /usr/local/bin/kpress
COPY config/ /etc/kpress/
USER nobody
EXPOSE 19092 9464
ENTRYPOINT ["/usr/local/bin/kpress"]
CMD ["run", "--config", "/etc/kpress/kpress.toml"]
