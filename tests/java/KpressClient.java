// kpress's Java test client: a real Apache Kafka kafka-clients producer, consumer and
// admin behind one small command line, compiled by scripts/setup.sh (java_clients)
// against each Kafka version's jars and driven by tests/harness/java_client.rs.
//
//   create-topic --bootstrap B --topic T [--topic T2]... [--partitions N] [--replication-factor R] [--config k=v]...
//   produce --bootstrap B --topic T [--topic T2]... [--compression C] [--acks A] [--linger-ms N]
//           [--batch-size N] [--idempotence true|false] [--partition P]
//           [--transactional-id ID --transaction commit|abort] [--property k=v]...
//           (--file F | --record VALUE...)
//       sends every record to each topic in turn (one producer, so Produce requests carry
//       several topics); prints "produced COUNT sha256=HEX" per topic's records
//   consume --bootstrap B --topic T [--topic T2]... --count N [--isolation read_committed|read_uncommitted]
//           [--group-id G] [--timeout-ms N] [--output F] [--property k=v]...
//       without --group-id it assigns every partition of the topics from the beginning;
//       with it, it subscribes, commits what it read, and (the group's assignment settled)
//       polls one more second for records beyond COUNT;
//       writes "topic TAB partition TAB offset TAB hex(value)" per record (in offset
//       order within each partition, partitions sorted) and prints "consumed COUNT sha256=HEX"
//   produce-steady --bootstrap B --topic T --file F --prefix P [--partitions N] [--rate N]
//           [--duration-ms N] [--stop-file F] [--acked-output F] [--acks-output F]
//           [--compression C] [--linger-ms N] [--batch-size N] [--property k=v]...
//       an idempotent acks=all producer of sequenced records: record n (from 0) is
//       "P n(9 digits) " followed by line n mod lines of F, the partitioner choosing its
//       partition; with --partitions, record n goes to partition p = n mod N as that
//       partition's record s = n div N, "P p s(9 digits) " followed by line s mod lines.
//       Sends N records per second (default 2000) until --duration-ms (default 60000)
//       passed or --stop-file exists; prints "progress sent=S acked=A failed=F" about
//       every 200 ms and at the end "steady sent=S acked=A failed=F"; writes the
//       acknowledged n, one per line, to --acked-output, and appends "p s micros" per
//       acknowledgement to --acks-output as its callback runs (micros: wall-clock
//       microseconds since the epoch, monotonic within the run); the first failure goes
//       to stderr
//   tally --bootstrap B --topic T --file F --prefix P [--partitions N] --output F
//           [--timeout-ms N] [--property k=v]...
//       reads every partition of T (with --partitions, 0..N-1) from the beginning to the
//       end offsets it finds at start and prints "tallied records=R corrupt=C", C
//       counting records that are not exactly a produce-steady record of that P and F
//       (with --partitions: of that partition, with no key or headers); writes the n of
//       each record (partitions in order, offsets in order) to --output, or with
//       --partitions "p offset s" per record, s being -1 for a corrupt one
//
// The checksum is SHA-256 over each record value as a 4-byte big-endian length and
// then the bytes, in order; the harness computes the same over what it expects.

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.PrintStream;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class KpressClient {
    private KpressClient() {}

    /** Parsed "--name value" options; repeated names keep every value in order. */
    private static final class Options {
        private final Map<String, List<String>> values = new LinkedHashMap<>();

        Options(String[] args, int from) {
            for (int i = from; i < args.length; i++) {
                String name = args[i];
                if (!name.startsWith("--")) {
                    throw new IllegalArgumentException("expected an --option, got: " + name);
                }
                if (i + 1 >= args.length) {
                    throw new IllegalArgumentException("option " + name + " needs a value");
                }
                values.computeIfAbsent(name.substring(2), k -> new ArrayList<>()).add(args[++i]);
            }
        }

        String get(String name, String fallback) {
            List<String> v = values.get(name);
            return v == null ? fallback : v.get(v.size() - 1);
        }

        String required(String name) {
            String v = get(name, null);
            if (v == null) {
                throw new IllegalArgumentException("missing --" + name);
            }
            return v;
        }

        List<String> all(String name) {
            return values.getOrDefault(name, Collections.emptyList());
        }

        Map<String, String> keyValues(String name) {
            Map<String, String> out = new LinkedHashMap<>();
            for (String kv : all(name)) {
                int eq = kv.indexOf('=');
                if (eq <= 0) {
                    throw new IllegalArgumentException("--" + name + " wants k=v, got: " + kv);
                }
                out.put(kv.substring(0, eq), kv.substring(eq + 1));
            }
            return out;
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 0) {
            System.err.println("usage: KpressClient create-topic|produce|consume|produce-steady|tally --option value...");
            System.exit(2);
        }
        Options opts = new Options(args, 1);
        switch (args[0]) {
            case "create-topic":
                createTopic(opts);
                break;
            case "produce":
                produce(opts);
                break;
            case "consume":
                consume(opts);
                break;
            case "produce-steady":
                produceSteady(opts);
                break;
            case "tally":
                tally(opts);
                break;
            default:
                System.err.println("unknown subcommand: " + args[0]);
                System.exit(2);
        }
    }

    private static void createTopic(Options opts) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, opts.required("bootstrap"));
        List<String> topics = opts.all("topic");
        if (topics.isEmpty()) {
            throw new IllegalArgumentException("missing --topic");
        }
        int partitions = Integer.parseInt(opts.get("partitions", "1"));
        short replication = Short.parseShort(opts.get("replication-factor", "1"));
        List<NewTopic> newTopics = new ArrayList<>();
        for (String topic : topics) {
            newTopics.add(new NewTopic(topic, partitions, replication).configs(opts.keyValues("config")));
        }
        try (Admin admin = Admin.create(props)) {
            admin.createTopics(newTopics).all().get(60, TimeUnit.SECONDS);
            // Wait until every partition has a leader, so a producer that starts next
            // does not race the metadata propagation.
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (true) {
                try {
                    var descriptions = admin.describeTopics(topics).allTopicNames().get(10, TimeUnit.SECONDS);
                    boolean ready = descriptions.values().stream().allMatch(d -> d.partitions().size() == partitions
                            && d.partitions().stream().allMatch(p -> p.leader() != null && !p.leader().isEmpty()));
                    if (ready) {
                        break;
                    }
                } catch (java.util.concurrent.ExecutionException e) {
                    // UnknownTopicOrPartition until the metadata arrives: retry.
                }
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("topics " + topics + " have no leaders after 60 s");
                }
                Thread.sleep(50);
            }
        }
        System.out.println("created " + String.join(",", topics));
    }

    private static List<byte[]> readRecords(Options opts) throws IOException {
        List<byte[]> records = new ArrayList<>();
        String file = opts.get("file", null);
        if (file != null) {
            byte[] all = Files.readAllBytes(Paths.get(file));
            int start = 0;
            for (int i = 0; i < all.length; i++) {
                if (all[i] == '\n') {
                    records.add(java.util.Arrays.copyOfRange(all, start, i));
                    start = i + 1;
                }
            }
            if (start < all.length) {
                records.add(java.util.Arrays.copyOfRange(all, start, all.length));
            }
        }
        for (String r : opts.all("record")) {
            records.add(r.getBytes(StandardCharsets.UTF_8));
        }
        return records;
    }

    private static void produce(Options opts) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, opts.required("bootstrap"));
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, opts.get("compression", "none"));
        props.put(ProducerConfig.ACKS_CONFIG, opts.get("acks", "all"));
        props.put(ProducerConfig.LINGER_MS_CONFIG, opts.get("linger-ms", "20"));
        props.put(ProducerConfig.BATCH_SIZE_CONFIG, opts.get("batch-size", "65536"));
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, opts.get("idempotence", "true"));
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        String transactionalId = opts.get("transactional-id", null);
        String transaction = opts.get("transaction", "commit");
        if (transactionalId != null) {
            props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        }
        props.putAll(opts.keyValues("property"));
        List<String> topics = opts.all("topic");
        if (topics.isEmpty()) {
            throw new IllegalArgumentException("missing --topic");
        }
        String partitionArg = opts.get("partition", null);
        Integer partition = partitionArg == null ? null : Integer.valueOf(partitionArg);

        List<byte[]> records = readRecords(opts);
        AtomicReference<Exception> failure = new AtomicReference<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            if (transactionalId != null) {
                producer.initTransactions();
                producer.beginTransaction();
            }
            for (byte[] value : records) {
                for (String topic : topics) {
                    producer.send(new ProducerRecord<>(topic, partition, null, value), (metadata, error) -> {
                        if (error != null) {
                            failure.compareAndSet(null, error);
                        }
                    });
                }
            }
            producer.flush();
            if (failure.get() == null && transactionalId != null) {
                if (transaction.equals("abort")) {
                    producer.abortTransaction();
                } else if (transaction.equals("commit")) {
                    producer.commitTransaction();
                } else {
                    throw new IllegalArgumentException("--transaction wants commit or abort, got: " + transaction);
                }
            }
        }
        if (failure.get() != null) {
            System.err.println("produce failed: " + failure.get());
            failure.get().printStackTrace();
            System.exit(1);
        }
        System.out.println("produced " + records.size() + " sha256=" + checksum(records));
    }

    private static void consume(Options opts) throws Exception {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, opts.required("bootstrap"));
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, opts.get("isolation", "read_uncommitted"));
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        // Checks every record's CRC on the consumer too (it is the default; say it).
        props.put(ConsumerConfig.CHECK_CRCS_CONFIG, "true");
        String groupId = opts.get("group-id", null);
        if (groupId != null) {
            props.put(ConsumerConfig.GROUP_ID_CONFIG, groupId);
        }
        props.putAll(opts.keyValues("property"));
        List<String> topics = opts.all("topic");
        if (topics.isEmpty()) {
            throw new IllegalArgumentException("missing --topic");
        }
        long expected = Long.parseLong(opts.required("count"));
        long timeoutMs = Long.parseLong(opts.get("timeout-ms", "60000"));

        // topic -> partition -> records in offset order
        Map<String, TreeMap<Integer, List<ConsumerRecord<byte[], byte[]>>>> received = new TreeMap<>();
        long count = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            if (groupId != null) {
                consumer.subscribe(topics);
            } else {
                List<TopicPartition> assignment = new ArrayList<>();
                for (String topic : topics) {
                    List<PartitionInfo> infos = consumer.partitionsFor(topic, Duration.ofMillis(timeoutMs));
                    for (PartitionInfo info : infos) {
                        assignment.add(new TopicPartition(topic, info.partition()));
                    }
                }
                consumer.assign(assignment);
                consumer.seekToBeginning(assignment);
            }
            long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
            while (count < expected && System.nanoTime() < deadline) {
                ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> record : batch) {
                    received.computeIfAbsent(record.topic(), t -> new TreeMap<>())
                            .computeIfAbsent(record.partition(), p -> new ArrayList<>())
                            .add(record);
                    count++;
                }
            }
            // A short extra poll catches records beyond the expected count, which the
            // harness reports as a mismatch rather than silently ignoring.
            if (count >= expected) {
                // A group member may not have its partitions yet (COUNT 0): wait for them,
                // so "nothing more" means the committed offsets were honoured.
                long extraMs = 300;
                if (groupId != null) {
                    extraMs = 1000;
                    while (consumer.assignment().isEmpty() && System.nanoTime() < deadline) {
                        count += collect(consumer.poll(Duration.ofMillis(200)), received);
                    }
                    if (consumer.assignment().isEmpty()) {
                        // Reading nothing without partitions would prove nothing.
                        System.err.println("group " + groupId + " got no partitions");
                        System.exit(1);
                    }
                }
                long extraDeadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(extraMs);
                while (System.nanoTime() < extraDeadline) {
                    count += collect(consumer.poll(Duration.ofMillis(100)), received);
                }
            }
            if (groupId != null) {
                consumer.commitSync();
            }
        }

        List<byte[]> values = new ArrayList<>();
        String output = opts.get("output", null);
        PrintStream stdout = System.out;
        try (Writer out = output == null
                ? new BufferedWriter(new OutputStreamWriter(stdout, StandardCharsets.UTF_8))
                : Files.newBufferedWriter(Paths.get(output), StandardCharsets.UTF_8)) {
            for (var topicEntry : received.entrySet()) {
                for (var partitionEntry : topicEntry.getValue().entrySet()) {
                    for (ConsumerRecord<byte[], byte[]> record : partitionEntry.getValue()) {
                        byte[] value = record.value() == null ? new byte[0] : record.value();
                        values.add(value);
                        out.write(topicEntry.getKey());
                        out.write('\t');
                        out.write(Integer.toString(partitionEntry.getKey()));
                        out.write('\t');
                        out.write(Long.toString(record.offset()));
                        out.write('\t');
                        out.write(hex(value));
                        out.write('\n');
                    }
                }
            }
            out.flush();
        }
        System.out.println("consumed " + count + " sha256=" + checksum(values));
        if (count != expected) {
            System.err.println("expected " + expected + " records, consumed " + count);
            System.exit(1);
        }
    }

    /** The records of produce-steady (see the top of this file). */
    private static final class SequencedRecords {
        private final byte[] prefix;
        private final List<byte[]> lines;
        /** --partitions, or 0: the partitioner places the records. */
        final int partitions;

        SequencedRecords(Options opts) throws IOException {
            prefix = (opts.required("prefix") + " ").getBytes(StandardCharsets.UTF_8);
            lines = readRecords(opts);
            if (lines.isEmpty()) {
                throw new IllegalArgumentException("--file holds no lines");
            }
            partitions = Integer.parseInt(opts.get("partitions", "0"));
        }

        /** Partition p's record s (with --partitions), or record s. */
        byte[] value(int p, long s) {
            String head = partitions > 0 ? String.format("%d %09d ", p, s) : String.format("%09d ", s);
            byte[] number = head.getBytes(StandardCharsets.UTF_8);
            byte[] line = lines.get((int) (s % lines.size()));
            byte[] out = new byte[prefix.length + number.length + line.length];
            System.arraycopy(prefix, 0, out, 0, prefix.length);
            System.arraycopy(number, 0, out, prefix.length, number.length);
            System.arraycopy(line, 0, out, prefix.length + number.length, line.length);
            return out;
        }

        /** The s of the record of partition p this value is exactly, or -1. */
        long parse(int p, byte[] value) {
            if (value == null || value.length < prefix.length) {
                return -1;
            }
            for (int i = 0; i < prefix.length; i++) {
                if (value[i] != prefix[i]) {
                    return -1;
                }
            }
            int digits = prefix.length;
            if (partitions > 0) {
                byte[] head = (p + " ").getBytes(StandardCharsets.UTF_8);
                if (value.length < digits + head.length
                        || !java.util.Arrays.equals(value, digits, digits + head.length, head, 0, head.length)) {
                    return -1;
                }
                digits += head.length;
            }
            if (value.length < digits + 10) {
                return -1;
            }
            long s = 0;
            for (int i = digits; i < digits + 9; i++) {
                if (value[i] < '0' || value[i] > '9') {
                    return -1;
                }
                s = s * 10 + (value[i] - '0');
            }
            return java.util.Arrays.equals(value, value(p, s)) ? s : -1;
        }
    }

    private static void produceSteady(Options opts) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, opts.required("bootstrap"));
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, opts.get("compression", "none"));
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.LINGER_MS_CONFIG, opts.get("linger-ms", "5"));
        props.put(ProducerConfig.BATCH_SIZE_CONFIG, opts.get("batch-size", "65536"));
        // Faults last seconds: retry (unlimited retries, the idempotent default) for
        // up to two minutes, and give up on a silent request after 15 s, not 30.
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "120000");
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "120000");
        props.putAll(opts.keyValues("property"));
        String topic = opts.required("topic");
        SequencedRecords records = new SequencedRecords(opts);
        int partitions = records.partitions;
        long rate = Long.parseLong(opts.get("rate", "2000"));
        long durationMs = Long.parseLong(opts.get("duration-ms", "60000"));
        String stopFile = opts.get("stop-file", null);
        String ackedOutput = opts.get("acked-output", null);
        String acksOutput = opts.get("acks-output", null);
        // Wall-clock microseconds at nanoTime `start`: acknowledgement times are start +
        // elapsed, as fine as nanoTime and comparable with the test's own clock.
        java.time.Instant wall = java.time.Instant.now();
        long start = System.nanoTime();
        long wallMicros = wall.getEpochSecond() * 1_000_000L + wall.getNano() / 1000;

        java.util.BitSet acked = new java.util.BitSet();
        java.util.concurrent.atomic.AtomicLong ackedCount = new java.util.concurrent.atomic.AtomicLong();
        java.util.concurrent.atomic.AtomicLong failed = new java.util.concurrent.atomic.AtomicLong();
        AtomicReference<Exception> firstFailure = new AtomicReference<>();
        long sent = 0;
        long nextProgress = start;
        try (Writer acks = acksOutput == null ? null : Files.newBufferedWriter(Paths.get(acksOutput), StandardCharsets.UTF_8);
                KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            while (true) {
                long now = System.nanoTime();
                long elapsedMs = TimeUnit.NANOSECONDS.toMillis(now - start);
                if (elapsedMs >= durationMs || (stopFile != null && Files.exists(Paths.get(stopFile)))) {
                    break;
                }
                long due = Math.min(rate * elapsedMs / 1000 + 1, Long.MAX_VALUE);
                while (sent < due) {
                    final long n = sent;
                    final Integer partition = partitions > 0 ? (int) (n % partitions) : null;
                    final long s = partitions > 0 ? n / partitions : n;
                    byte[] value = records.value(partition == null ? 0 : partition, s);
                    producer.send(new ProducerRecord<>(topic, partition, null, value), (metadata, error) -> {
                        long at = wallMicros + (System.nanoTime() - start) / 1000;
                        if (error == null) {
                            synchronized (acked) {
                                acked.set((int) n);
                                if (acks != null) {
                                    try {
                                        acks.write(metadata.partition() + " " + s + " " + at + "\n");
                                    } catch (IOException e) {
                                        firstFailure.compareAndSet(null, e);
                                    }
                                }
                            }
                            ackedCount.incrementAndGet();
                        } else {
                            failed.incrementAndGet();
                            firstFailure.compareAndSet(null, error);
                        }
                    });
                    sent++;
                }
                if (now >= nextProgress) {
                    System.out.println("progress sent=" + sent + " acked=" + ackedCount.get() + " failed=" + failed.get());
                    System.out.flush();
                    nextProgress = now + TimeUnit.MILLISECONDS.toNanos(200);
                }
                Thread.sleep(2);
            }
            // Everything sent is settled (acked or failed) before the producer closes.
            producer.flush();
        }
        if (ackedOutput != null) {
            try (Writer out = Files.newBufferedWriter(Paths.get(ackedOutput), StandardCharsets.UTF_8)) {
                synchronized (acked) {
                    for (int n = acked.nextSetBit(0); n >= 0; n = acked.nextSetBit(n + 1)) {
                        out.write(Integer.toString(n));
                        out.write('\n');
                    }
                }
            }
        }
        if (firstFailure.get() != null) {
            System.err.println("first failed send: " + firstFailure.get());
            firstFailure.get().printStackTrace();
        }
        System.out.println("steady sent=" + sent + " acked=" + ackedCount.get() + " failed=" + failed.get());
    }

    private static void tally(Options opts) throws Exception {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, opts.required("bootstrap"));
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.CHECK_CRCS_CONFIG, "true");
        props.putAll(opts.keyValues("property"));
        String topic = opts.required("topic");
        SequencedRecords records = new SequencedRecords(opts);
        int partitions = records.partitions;
        long timeoutMs = Long.parseLong(opts.get("timeout-ms", "60000"));
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);

        long total = 0;
        long corrupt = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props);
                Writer out = Files.newBufferedWriter(Paths.get(opts.required("output")), StandardCharsets.UTF_8)) {
            List<TopicPartition> assignment = new ArrayList<>();
            if (partitions > 0) {
                for (int p = 0; p < partitions; p++) {
                    assignment.add(new TopicPartition(topic, p));
                }
            } else {
                for (PartitionInfo info : consumer.partitionsFor(topic, Duration.ofMillis(timeoutMs))) {
                    assignment.add(new TopicPartition(topic, info.partition()));
                }
                assignment.sort(java.util.Comparator.comparingInt(TopicPartition::partition));
            }
            consumer.assign(assignment);
            consumer.seekToBeginning(assignment);
            Map<TopicPartition, Long> end = consumer.endOffsets(assignment, Duration.ofMillis(timeoutMs));
            // partition -> its output lines in offset order (poll returns each
            // partition's records in order, partitions interleaved)
            TreeMap<Integer, StringBuilder> read = new TreeMap<>();
            while (true) {
                boolean done = true;
                for (TopicPartition tp : assignment) {
                    if (consumer.position(tp, Duration.ofMillis(timeoutMs)) < end.get(tp)) {
                        done = false;
                    }
                }
                if (done) {
                    break;
                }
                if (System.nanoTime() > deadline) {
                    System.err.println("tally: the end offsets " + end + " not reached within " + timeoutMs + " ms");
                    System.exit(1);
                }
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(200))) {
                    boolean plain = partitions == 0 || (record.key() == null && !record.headers().iterator().hasNext());
                    long n = plain ? records.parse(record.partition(), record.value()) : -1;
                    if (n < 0) {
                        if (corrupt == 0) {
                            System.err.println("not a record of this producer at " + record.topic() + "-"
                                    + record.partition() + "@" + record.offset() + ": "
                                    + new String(record.value() == null ? new byte[0] : record.value(), StandardCharsets.UTF_8));
                        }
                        corrupt++;
                    }
                    StringBuilder lines = read.computeIfAbsent(record.partition(), p -> new StringBuilder());
                    if (partitions > 0) {
                        lines.append(record.partition()).append(' ').append(record.offset()).append(' ').append(n).append('\n');
                    } else if (n >= 0) {
                        lines.append(n).append('\n');
                    }
                    total++;
                }
            }
            for (StringBuilder lines : read.values()) {
                out.write(lines.toString());
            }
        }
        System.out.println("tallied records=" + total + " corrupt=" + corrupt);
    }

    private static int collect(ConsumerRecords<byte[], byte[]> batch,
            Map<String, TreeMap<Integer, List<ConsumerRecord<byte[], byte[]>>>> received) {
        int n = 0;
        for (ConsumerRecord<byte[], byte[]> record : batch) {
            received.computeIfAbsent(record.topic(), t -> new TreeMap<>())
                    .computeIfAbsent(record.partition(), p -> new ArrayList<>())
                    .add(record);
            n++;
        }
        return n;
    }

    private static final char[] HEX = "0123456789abcdef".toCharArray();

    private static String hex(byte[] bytes) {
        char[] out = new char[bytes.length * 2];
        for (int i = 0; i < bytes.length; i++) {
            out[2 * i] = HEX[(bytes[i] >> 4) & 0xF];
            out[2 * i + 1] = HEX[bytes[i] & 0xF];
        }
        return new String(out);
    }

    private static String checksum(List<byte[]> records) throws Exception {
        MessageDigest sha = MessageDigest.getInstance("SHA-256");
        for (byte[] r : records) {
            sha.update(new byte[] {(byte) (r.length >>> 24), (byte) (r.length >>> 16), (byte) (r.length >>> 8), (byte) r.length});
            sha.update(r);
        }
        return hex(sha.digest());
    }
}
