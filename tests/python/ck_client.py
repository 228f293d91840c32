"""kpress's confluent-kafka (librdkafka) test client, driven by tests/harness/confluent.rs.

  ck_client.py produce --bootstrap B --topic T [--topic T2]... [--compression C] [--acks A] [--linger-ms N]
               [--batch-size N] [--idempotence true|false] [--partition P]
               [--transactional-id ID --transaction commit|abort] [--property k=v]...
               (--file F | --record VALUE...)
      sends every record to each topic in turn; prints "produced COUNT sha256=HEX"
      over one topic's records
  ck_client.py consume --bootstrap B --topic T [--topic T2]... --count N
               [--isolation read_committed|read_uncommitted] [--group-id G]
               [--timeout-ms N] [--output F] [--property k=v]...
      without --group-id it assigns every partition from the beginning; writes
      "topic TAB partition TAB offset TAB hex(value)" per record (offset order within a
      partition, partitions sorted) and prints "consumed COUNT sha256=HEX"

The checksum is SHA-256 over each value as a 4-byte big-endian length and the bytes.
"""

import argparse
import hashlib
import struct
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def checksum(values):
    sha = hashlib.sha256()
    for v in values:
        sha.update(struct.pack(">I", len(v)))
        sha.update(v)
    return sha.hexdigest()


def key_values(pairs):
    out = {}
    for kv in pairs or []:
        k, sep, v = kv.partition("=")
        if not sep or not k:
            raise SystemExit(f"--property wants k=v, got: {kv}")
        out[k] = v
    return out


def read_records(args):
    records = []
    if args.file:
        with open(args.file, "rb") as f:
            data = f.read()
        records = data.split(b"\n")
        if data.endswith(b"\n") or not data:
            records.pop()
    records += [r.encode() for r in args.record or []]
    return records


def produce(args):
    conf = {
        "bootstrap.servers": args.bootstrap,
        "compression.type": args.compression,
        "acks": args.acks,
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_size,
        "enable.idempotence": args.idempotence == "true",
        "message.timeout.ms": 60000,
    }
    if args.transactional_id:
        conf["transactional.id"] = args.transactional_id
    conf.update(key_values(args.property))
    producer = Producer(conf)
    records = read_records(args)
    failures = []

    def on_delivery(err, _msg):
        if err is not None:
            failures.append(err)

    if args.transactional_id:
        producer.init_transactions(60)
        producer.begin_transaction()
    partition = args.partition if args.partition is not None else -1
    for value in records:
        for topic in args.topic:
            while True:
                try:
                    producer.produce(topic, value=value, partition=partition, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
    # Everything is delivered before a transaction ends, so an aborted transaction's
    # records reach the log too (and its marker then hides them).
    remaining = producer.flush(60)
    if failures or remaining:
        print(f"produce failed: {failures[:5]} ({remaining} undelivered)", file=sys.stderr)
        sys.exit(1)
    if args.transactional_id:
        if args.transaction == "abort":
            producer.abort_transaction(60)
        else:
            producer.commit_transaction(60)
    print(f"produced {len(records)} sha256={checksum(records)}")


def consume(args):
    conf = {
        "bootstrap.servers": args.bootstrap,
        "isolation.level": args.isolation,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "check.crcs": True,
        "group.id": args.group_id or "kpress-tests-assign",
    }
    conf.update(key_values(args.property))
    consumer = Consumer(conf)
    deadline = time.monotonic() + args.timeout_ms / 1000.0
    if args.group_id:
        consumer.subscribe(args.topic)
    else:
        assignment = []
        for topic in args.topic:
            metadata = consumer.list_topics(topic, timeout=max(1.0, deadline - time.monotonic()))
            for p in sorted(metadata.topics[topic].partitions):
                assignment.append(TopicPartition(topic, p, -2))  # -2: OFFSET_BEGINNING
        consumer.assign(assignment)
    received = {}
    count = 0

    def take(messages):
        nonlocal count
        for m in messages:
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    continue
                raise KafkaException(m.error())
            received.setdefault((m.topic(), m.partition()), []).append((m.offset(), m.value() or b""))
            count += 1

    while count < args.count and time.monotonic() < deadline:
        take(consumer.consume(1000, 0.2))
    if count >= args.count:
        take(consumer.consume(1000, 0.3))
    consumer.close()

    values = []
    out = open(args.output, "w") if args.output else sys.stdout
    for (topic, partition) in sorted(received):
        for offset, value in received[(topic, partition)]:
            values.append(value)
            out.write(f"{topic}\t{partition}\t{offset}\t{value.hex()}\n")
    if args.output:
        out.close()
    print(f"consumed {count} sha256={checksum(values)}")
    if count != args.count:
        print(f"expected {args.count} records, consumed {count}", file=sys.stderr)
        sys.exit(1)


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("produce")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", action="append", required=True)
    p.add_argument("--compression", default="none")
    p.add_argument("--acks", default="all")
    p.add_argument("--linger-ms", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=1000000)
    p.add_argument("--idempotence", default="true")
    p.add_argument("--partition", type=int)
    p.add_argument("--transactional-id")
    p.add_argument("--transaction", default="commit", choices=["commit", "abort"])
    p.add_argument("--property", action="append")
    p.add_argument("--file")
    p.add_argument("--record", action="append")
    c = sub.add_parser("consume")
    c.add_argument("--bootstrap", required=True)
    c.add_argument("--topic", action="append", required=True)
    c.add_argument("--count", type=int, required=True)
    c.add_argument("--isolation", default="read_uncommitted")
    c.add_argument("--group-id")
    c.add_argument("--timeout-ms", type=int, default=60000)
    c.add_argument("--output")
    c.add_argument("--property", action="append")
    args = parser.parse_args()
    produce(args) if args.command == "produce" else consume(args)


if __name__ == "__main__":
    main()
