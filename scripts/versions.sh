# Versions of the real components the tests and the local run use.
KAFKA_VERSION=4.1.1
KAFKA_OLD_VERSION=3.9.1
CONFLUENT_KAFKA_VERSION=2.16.1
