// A producer whose every acknowledgement is timed, and the reader that checks what it
// stored, for tests that roll a cluster under load. Compiled by the harness
// (tests/harness/timed_producer.rs) against a Kafka version's kafka-clients.
//
//   produce --bootstrap B --topic T --partitions N --prefix P --file F [--rate R]
//           [--duration-ms D] [--stop-file S] --acks-output A [--compression C]
//           [--linger-ms L] [--property k=v]...
//       an idempotent acks=all producer: the i-th record sent (from 0) goes to
//       partition i mod N as that partition's record s = i div N, its value
//       "P p s(9 digits) " followed by line s mod lines of F; R records per second
//       (default 1000) until D ms passed (default 300000) or S exists. Every
//       acknowledgement appends "p s micros" to A (micros: wall-clock microseconds
//       since the epoch when the callback ran; monotonic within the run). Prints
//       "progress sent=S acked=K failed=X" about every 200 ms and "timed sent=S
//       acked=K failed=X" at the end; the first failure goes to stderr.
//   read --bootstrap B --topic T --partitions N --prefix P --file F --output O [--timeout-ms M]
//       reads partitions 0..N-1 of T from the beginning to the end offsets found at
//       start and writes "p offset s" per record, in offset order per partition, s being
//       -1 for a record that is not byte for byte the record s of partition p of that
//       P and F (or carries a key or headers); prints "read records=R corrupt=C".

import java.io.IOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class RollingClient {
    private RollingClient() {}

    public static void main(String[] args) throws Exception {
        if (args.length == 0) {
            System.err.println("usage: RollingClient produce|read --option value...");
            System.exit(2);
        }
        Map<String, List<String>> opts = new HashMap<>();
        for (int i = 1; i < args.length; i += 2) {
            if (!args[i].startsWith("--") || i + 1 >= args.length) {
                throw new IllegalArgumentException("expected --option value at: " + args[i]);
            }
            opts.computeIfAbsent(args[i].substring(2), k -> new ArrayList<>()).add(args[i + 1]);
        }
        switch (args[0]) {
            case "produce":
                produce(opts);
                break;
            case "read":
                read(opts);
                break;
            default:
                System.err.println("unknown command: " + args[0]);
                System.exit(2);
        }
    }

    private static String get(Map<String, List<String>> opts, String name, String fallback) {
        List<String> values = opts.get(name);
        if (values == null) {
            if (fallback == null) {
                throw new IllegalArgumentException("missing --" + name);
            }
            return fallback;
        }
        return values.get(values.size() - 1);
    }

    /** The records: "P p s(9 digits) " and a line of the file. */
    private static final class Records {
        private final byte[] prefix;
        private final List<byte[]> lines = new ArrayList<>();

        Records(Map<String, List<String>> opts) throws IOException {
            prefix = (get(opts, "prefix", null) + " ").getBytes(StandardCharsets.UTF_8);
            for (String line : Files.readAllLines(Paths.get(get(opts, "file", null)), StandardCharsets.UTF_8)) {
                if (!line.isEmpty()) {
                    lines.add(line.getBytes(StandardCharsets.UTF_8));
                }
            }
            if (lines.isEmpty()) {
                throw new IllegalArgumentException("--file holds no lines");
            }
        }

        byte[] value(int partition, long seq) {
            byte[] head = String.format("%d %09d ", partition, seq).getBytes(StandardCharsets.UTF_8);
            byte[] line = lines.get((int) (seq % lines.size()));
            byte[] out = new byte[prefix.length + head.length + line.length];
            System.arraycopy(prefix, 0, out, 0, prefix.length);
            System.arraycopy(head, 0, out, prefix.length, head.length);
            System.arraycopy(line, 0, out, prefix.length + head.length, line.length);
            return out;
        }

        /** The s of the record of `partition` this value is exactly, or -1. */
        long parse(int partition, byte[] value) {
            if (value == null || value.length < prefix.length) {
                return -1;
            }
            for (int i = 0; i < prefix.length; i++) {
                if (value[i] != prefix[i]) {
                    return -1;
                }
            }
            String rest = new String(value, prefix.length, Math.min(value.length - prefix.length, 32),
                    StandardCharsets.UTF_8);
            String[] words = rest.split(" ", 3);
            if (words.length < 3 || !words[0].equals(Integer.toString(partition)) || words[1].length() != 9) {
                return -1;
            }
            long seq;
            try {
                seq = Long.parseLong(words[1]);
            } catch (NumberFormatException e) {
                return -1;
            }
            return Arrays.equals(value, value(partition, seq)) ? seq : -1;
        }
    }

    private static void produce(Map<String, List<String>> opts) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, get(opts, "bootstrap", null));
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, get(opts, "compression", "none"));
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.LINGER_MS_CONFIG, get(opts, "linger-ms", "5"));
        // Retries are unlimited (the idempotent default) for two minutes, longer than
        // any step of a rolling operation takes.
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "120000");
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "120000");
        for (String kv : opts.getOrDefault("property", List.of())) {
            int eq = kv.indexOf('=');
            if (eq <= 0) {
                throw new IllegalArgumentException("--property wants k=v, got: " + kv);
            }
            props.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        String topic = get(opts, "topic", null);
        int partitions = Integer.parseInt(get(opts, "partitions", null));
        Records records = new Records(opts);
        long rate = Long.parseLong(get(opts, "rate", "1000"));
        long durationMs = Long.parseLong(get(opts, "duration-ms", "300000"));
        String stopFile = get(opts, "stop-file", "");
        // Wall-clock microseconds at nanoTime `base`: ack times are base + elapsed, so
        // they are as fine as nanoTime and comparable with the test's own clock.
        Instant wall = Instant.now();
        long base = System.nanoTime();
        long wallMicros = wall.getEpochSecond() * 1_000_000L + wall.getNano() / 1000;

        AtomicLong acked = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        AtomicReference<Exception> firstFailure = new AtomicReference<>();
        long sent = 0;
        long nextProgress = base;
        try (Writer out = Files.newBufferedWriter(Paths.get(get(opts, "acks-output", null)), StandardCharsets.UTF_8);
                KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            while (true) {
                long now = System.nanoTime();
                long elapsedMs = TimeUnit.NANOSECONDS.toMillis(now - base);
                if (elapsedMs >= durationMs || (!stopFile.isEmpty() && Files.exists(Paths.get(stopFile)))) {
                    break;
                }
                long due = rate * elapsedMs / 1000 + 1;
                while (sent < due) {
                    final int partition = (int) (sent % partitions);
                    final long seq = sent / partitions;
                    producer.send(new ProducerRecord<>(topic, partition, null, records.value(partition, seq)),
                            (metadata, error) -> {
                                long at = wallMicros + (System.nanoTime() - base) / 1000;
                                if (error == null) {
                                    acked.incrementAndGet();
                                    synchronized (out) {
                                        try {
                                            out.write(partition + " " + seq + " " + at + "\n");
                                        } catch (IOException e) {
                                            firstFailure.compareAndSet(null, e);
                                        }
                                    }
                                } else {
                                    failed.incrementAndGet();
                                    firstFailure.compareAndSet(null, error);
                                }
                            });
                    sent++;
                }
                if (now >= nextProgress) {
                    System.out.println("progress sent=" + sent + " acked=" + acked.get() + " failed=" + failed.get());
                    System.out.flush();
                    nextProgress = now + TimeUnit.MILLISECONDS.toNanos(200);
                }
                Thread.sleep(2);
            }
            // Everything sent is settled (acked or failed) before the producer closes.
            producer.flush();
            synchronized (out) {
                out.flush();
            }
        }
        if (firstFailure.get() != null) {
            System.err.println("first failed send: " + firstFailure.get());
            firstFailure.get().printStackTrace();
        }
        System.out.println("timed sent=" + sent + " acked=" + acked.get() + " failed=" + failed.get());
    }

    private static void read(Map<String, List<String>> opts) throws Exception {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, get(opts, "bootstrap", null));
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.CHECK_CRCS_CONFIG, "true");
        String topic = get(opts, "topic", null);
        int partitions = Integer.parseInt(get(opts, "partitions", null));
        Records records = new Records(opts);
        long timeoutMs = Long.parseLong(get(opts, "timeout-ms", "60000"));
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
        long total = 0;
        long corrupt = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props);
                Writer out = Files.newBufferedWriter(Paths.get(get(opts, "output", null)), StandardCharsets.UTF_8)) {
            List<TopicPartition> assignment = new ArrayList<>();
            for (int p = 0; p < partitions; p++) {
                assignment.add(new TopicPartition(topic, p));
            }
            consumer.assign(assignment);
            consumer.seekToBeginning(assignment);
            Map<TopicPartition, Long> end = consumer.endOffsets(assignment, Duration.ofMillis(timeoutMs));
            // Per partition, its lines in offset order (poll returns each partition's
            // records in order, partitions interleaved).
            List<StringBuilder> lines = new ArrayList<>();
            for (int p = 0; p < partitions; p++) {
                lines.add(new StringBuilder());
            }
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
                    System.err.println("read: the end offsets " + end + " not reached within " + timeoutMs + " ms");
                    System.exit(1);
                }
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(200))) {
                    boolean plain = record.key() == null && !record.headers().iterator().hasNext();
                    long seq = plain ? records.parse(record.partition(), record.value()) : -1;
                    if (seq < 0) {
                        if (corrupt == 0) {
                            System.err.println("not a record of this producer at " + record.topic() + "-"
                                    + record.partition() + "@" + record.offset() + ": "
                                    + new String(record.value() == null ? new byte[0] : record.value(),
                                            StandardCharsets.UTF_8));
                        }
                        corrupt++;
                    }
                    lines.get(record.partition()).append(record.partition()).append(' ')
                            .append(record.offset()).append(' ').append(seq).append('\n');
                    total++;
                }
            }
            for (StringBuilder partition : lines) {
                out.write(partition.toString());
            }
        }
        System.out.println("read records=" + total + " corrupt=" + corrupt);
    }
}
