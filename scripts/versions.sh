# Versions of the real components the tests and the local run use.
KAFKA_VERSION=4.1.1
KAFKA_OLD_VERSION=3.9.1
CONFLUENT_KAFKA_VERSION=2.16.1
# Java kafka-clients from before zstd (2.1, Produce v7): produces with Produce v3-v6 only.
KAFKA_CLIENTS_PRE_ZSTD_VERSION=2.0.1
# KafkaJS from the npm registry, with no codec plug-ins: a consumer that reads gzip only.
KAFKAJS_VERSION=2.2.4
# Deployment checks (tests/deploy.rs, tests/container.rs): helm built from source with
# `go install`, kubernetes-validate (ships the Kubernetes schemas, validates offline),
# and the suite the container test's debian:bookworm-slim base is built from.
HELM_VERSION=v3.22.0
KUBERNETES_VALIDATE_VERSION=1.37.0
CONTAINER_BASE_SUITE=bookworm
