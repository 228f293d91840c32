# kpress: build the release binary, then ship it on a slim Debian with the runtime
# libraries its codecs link (ISA-L). QATzip is loaded at run time when present; mount
# or install it (libqatzip3) in a derived image for QAT hosts.
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
