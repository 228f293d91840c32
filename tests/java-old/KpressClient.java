// kpress's Java test client for old kafka-clients: the `produce` and `consume` command
// lines of tests/java/KpressClient.java (same options, same output, same checksum),
// written against the kafka-clients 2.0 API, which tests/java (Admin, delivery.timeout.ms,
// allTopicNames) does not compile against. kafka-clients 2.0 predates zstd: it produces
// with Produce v3-v6 only. Compiled by scripts/setup.sh (java_clients ... tests/java-old)
// and driven by tests/harness/java_client.rs like any other version's client.
//
//   produce --bootstrap B --topic T [--topic T2]... [--compression C] [--acks A] [--linger-ms N]
//           [--batch-size N] [--idempotence true|false] [--partition P] [--property k=v]...
//           (--file F | --record VALUE...)
//       prints "produced COUNT sha256=HEX"
//   consume --bootstrap B --topic T [--topic T2]... --count N [--isolation read_committed|read_uncommitted]
//           [--timeout-ms N] [--output F] [--property k=v]...
//       assigns every partition of the topics from the beginning; writes
//       "topic TAB partition TAB offset TAB hex(value)" per record and prints
//       "consumed COUNT sha256=HEX"
//
// Topics (create-topic), consumer groups and transactions are left to the current client.

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

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

        List<String> topics() {
            List<String> topics = all("topic");
            if (topics.isEmpty()) {
                throw new IllegalArgumentException("missing --topic");
            }
            return topics;
        }

        void refuse(String name, String why) {
            if (values.containsKey(name)) {
                throw new IllegalArgumentException("--" + name + " is not supported here: " + why);
            }
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
            System.err.println("usage: KpressClient produce|consume --option value...");
            System.exit(2);
        }
        Options opts = new Options(args, 1);
        switch (args[0]) {
            case "produce":
                produce(opts);
                break;
            case "consume":
                consume(opts);
                break;
            default:
                System.err.println("unknown subcommand for the old-clients build: " + args[0]
                        + " (create topics, groups and transactions with the current client)");
                System.exit(2);
        }
    }

    private static List<byte[]> readRecords(Options opts) throws IOException {
        List<byte[]> records = new ArrayList<>();
        String file = opts.get("file", null);
        if (file != null) {
            byte[] all = Files.readAllBytes(Paths.get(file));
            int start = 0;
            for (int i = 0; i < all.length; i++) {
                if (all[i] == '\n') {
                    records.add(Arrays.copyOfRange(all, start, i));
                    start = i + 1;
                }
            }
            if (start < all.length) {
                records.add(Arrays.copyOfRange(all, start, all.length));
            }
        }
        for (String r : opts.all("record")) {
            records.add(r.getBytes(StandardCharsets.UTF_8));
        }
        return records;
    }

    private static void produce(Options opts) throws Exception {
        opts.refuse("transactional-id", "use the current client for transactions");
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, opts.required("bootstrap"));
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, opts.get("compression", "none"));
        props.put(ProducerConfig.ACKS_CONFIG, opts.get("acks", "all"));
        props.put(ProducerConfig.LINGER_MS_CONFIG, opts.get("linger-ms", "20"));
        props.put(ProducerConfig.BATCH_SIZE_CONFIG, opts.get("batch-size", "65536"));
        String idempotence = opts.get("idempotence", "true");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, idempotence);
        // 2.0 retries nothing by default (2.1 made it unlimited, bounded by
        // delivery.timeout.ms, which 2.0 lacks); idempotence requires retries.
        props.put(ProducerConfig.RETRIES_CONFIG, idempotence.equals("true") ? Integer.toString(Integer.MAX_VALUE) : "10");
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "30000");
        props.putAll(opts.keyValues("property"));
        List<String> topics = opts.topics();
        String partitionArg = opts.get("partition", null);
        Integer partition = partitionArg == null ? null : Integer.valueOf(partitionArg);

        List<byte[]> records = readRecords(opts);
        AtomicReference<Exception> failure = new AtomicReference<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
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
        }
        if (failure.get() != null) {
            System.err.println("produce failed: " + failure.get());
            failure.get().printStackTrace();
            System.exit(1);
        }
        System.out.println("produced " + records.size() + " sha256=" + checksum(records));
    }

    private static void consume(Options opts) throws Exception {
        opts.refuse("group-id", "use the current client for consumer groups");
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, opts.required("bootstrap"));
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, opts.get("isolation", "read_uncommitted"));
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.CHECK_CRCS_CONFIG, "true");
        props.putAll(opts.keyValues("property"));
        List<String> topics = opts.topics();
        long expected = Long.parseLong(opts.required("count"));
        long timeoutMs = Long.parseLong(opts.get("timeout-ms", "60000"));

        // topic -> partition -> records in offset order
        Map<String, TreeMap<Integer, List<ConsumerRecord<byte[], byte[]>>>> received = new TreeMap<>();
        long count = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            List<TopicPartition> assignment = new ArrayList<>();
            for (String topic : topics) {
                List<PartitionInfo> infos = consumer.partitionsFor(topic, Duration.ofMillis(timeoutMs));
                for (PartitionInfo info : infos) {
                    assignment.add(new TopicPartition(topic, info.partition()));
                }
            }
            consumer.assign(assignment);
            consumer.seekToBeginning(assignment);
            long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
            while (count < expected && System.nanoTime() < deadline) {
                count += collect(consumer.poll(Duration.ofMillis(200)), received);
            }
            // A short extra poll catches records beyond the expected count, which the
            // harness reports as a mismatch rather than silently ignoring.
            if (count >= expected) {
                long extraDeadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(300);
                while (System.nanoTime() < extraDeadline) {
                    count += collect(consumer.poll(Duration.ofMillis(100)), received);
                }
            }
        }

        List<byte[]> values = new ArrayList<>();
        String output = opts.get("output", null);
        try (Writer out = output == null
                ? new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8))
                : Files.newBufferedWriter(Paths.get(output), StandardCharsets.UTF_8)) {
            for (Map.Entry<String, TreeMap<Integer, List<ConsumerRecord<byte[], byte[]>>>> topicEntry : received.entrySet()) {
                for (Map.Entry<Integer, List<ConsumerRecord<byte[], byte[]>>> partitionEntry : topicEntry.getValue().entrySet()) {
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
