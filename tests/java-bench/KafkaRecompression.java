import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeSet;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.record.AbstractRecords;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.MemoryRecordsBuilder;
import org.apache.kafka.common.record.MutableRecordBatch;
import org.apache.kafka.common.record.Record;
import org.apache.kafka.common.record.RecordBatch;
import org.apache.kafka.common.utils.BufferSupplier;
import org.apache.kafka.common.utils.CloseableIterator;

/**
 * Kafka's own recompression, per core: what the broker's LogValidator does to each batch
 * when a topic's compression.type differs from the batch's codec (check the batch,
 * decompress its records, rebuild them into a new batch in the target codec), on one
 * thread, timed by the thread's CPU clock.
 *
 * <p>Commands, one per line on stdin, each answered by one line on stdout:
 *
 * <ul>
 *   <li>{@code rewrite CODEC LEVEL WARMUP PASSES INPUT OUTPUT}: LEVEL is a number or
 *       {@code default}; WARMUP untimed passes (for the JIT), then PASSES timed ones; the
 *       last pass's batches are written to OUTPUT. Answers {@code rewrote batches=N
 *       records=N value_bytes=N bytes_in=N bytes_out=N cpu_ns=N process_cpu_ns=N
 *       passes=N}: cpu_ns the rebuilding thread's CPU summed over the timed passes,
 *       process_cpu_ns the whole JVM's over the same passes (GC and JIT threads too).
 *   <li>{@code verify FILE}: every batch's CRC checked and every record read. Answers
 *       {@code verified batches=N records=N codecs=a,b sha256=HEX}, the digest over each
 *       value's 4-byte big-endian length and bytes, in order.
 * </ul>
 *
 * An error answers {@code error MESSAGE} and the program goes on with the next command.
 */
public final class KafkaRecompression {
    private static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();
    private static final com.sun.management.OperatingSystemMXBean OS =
            (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();

    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            line = line.trim();
            if (line.isEmpty()) {
                continue;
            }
            String answer;
            try {
                answer = run(line.split(" "));
            } catch (Exception e) {
                answer = "error " + e.toString().replace('\n', ' ');
            }
            System.out.println(answer);
            System.out.flush();
        }
    }

    private static String run(String[] words) throws Exception {
        switch (words[0]) {
            case "rewrite":
                return rewrite(
                        target(words[1], words[2]),
                        Integer.parseInt(words[3]),
                        Integer.parseInt(words[4]),
                        Path.of(words[5]),
                        Path.of(words[6]));
            case "verify":
                return verify(Path.of(words[1]));
            default:
                throw new IllegalArgumentException("unknown command " + words[0]);
        }
    }

    /** Kafka 3.8+'s Compression for a codec name and level ("default": the codec's own). */
    static Compression target(String codec, String level) {
        boolean dflt = level.equals("default");
        switch (codec) {
            case "none":
                return Compression.NONE;
            case "snappy":
                return Compression.snappy().build();
            case "gzip":
                return dflt ? Compression.gzip().build() : Compression.gzip().level(Integer.parseInt(level)).build();
            case "lz4":
                return dflt ? Compression.lz4().build() : Compression.lz4().level(Integer.parseInt(level)).build();
            case "zstd":
                return dflt ? Compression.zstd().build() : Compression.zstd().level(Integer.parseInt(level)).build();
            default:
                throw new IllegalArgumentException("unknown codec " + codec);
        }
    }

    /** What one pass over a file did. */
    static final class Pass {
        long batches;
        long records;
        long valueBytes;
        long bytesOut;
        List<ByteBuffer> output = new ArrayList<>();
    }

    private static String rewrite(Compression target, int warmup, int passes, Path input, Path output)
            throws IOException {
        ByteBuffer source = ByteBuffer.wrap(Files.readAllBytes(input));
        BufferSupplier buffers = BufferSupplier.create();
        for (int i = 0; i < warmup; i++) {
            rewritePass(source.duplicate(), target, buffers);
        }
        Pass last = null;
        long cpuNanos = 0;
        long processStarted = OS.getProcessCpuTime();
        for (int i = 0; i < passes; i++) {
            long started = THREADS.getCurrentThreadCpuTime();
            last = rewritePass(source.duplicate(), target, buffers);
            cpuNanos += THREADS.getCurrentThreadCpuTime() - started;
        }
        long processCpuNanos = OS.getProcessCpuTime() - processStarted;
        try (var out = Files.newByteChannel(
                output,
                java.nio.file.StandardOpenOption.CREATE,
                java.nio.file.StandardOpenOption.TRUNCATE_EXISTING,
                java.nio.file.StandardOpenOption.WRITE)) {
            for (ByteBuffer batch : last.output) {
                while (batch.hasRemaining()) {
                    out.write(batch);
                }
            }
        }
        return String.format(
                "rewrote batches=%d records=%d value_bytes=%d bytes_in=%d bytes_out=%d cpu_ns=%d process_cpu_ns=%d passes=%d",
                last.batches,
                last.records,
                last.valueBytes,
                source.remaining(),
                last.bytesOut,
                cpuNanos,
                processCpuNanos,
                passes);
    }

    /**
     * The broker's path for a batch whose codec differs from the topic's: check it, read
     * its records (decompressing), and build them into one new batch at the same offsets
     * with the same producer state, sized by Kafka's own estimate.
     */
    static Pass rewritePass(ByteBuffer source, Compression target, BufferSupplier buffers) {
        Pass pass = new Pass();
        for (MutableRecordBatch batch : MemoryRecords.readableRecords(source).batches()) {
            batch.ensureValid();
            List<Record> records = new ArrayList<>();
            try (CloseableIterator<Record> it = batch.streamingIterator(buffers)) {
                while (it.hasNext()) {
                    Record record = it.next();
                    record.ensureValid();
                    records.add(record);
                    pass.valueBytes += record.valueSize();
                }
            }
            int estimate = AbstractRecords.estimateSizeInBytes(
                    batch.magic(), batch.baseOffset(), target.type(), records);
            MemoryRecordsBuilder builder = MemoryRecords.builder(
                    ByteBuffer.allocate(estimate),
                    batch.magic(),
                    target,
                    batch.timestampType(),
                    batch.baseOffset(),
                    RecordBatch.NO_TIMESTAMP,
                    batch.producerId(),
                    batch.producerEpoch(),
                    batch.baseSequence(),
                    batch.isTransactional(),
                    batch.partitionLeaderEpoch());
            for (Record record : records) {
                builder.appendWithOffset(
                        record.offset(), record.timestamp(), record.key(), record.value(), record.headers());
            }
            ByteBuffer rebuilt = builder.build().buffer();
            pass.batches++;
            pass.records += records.size();
            pass.bytesOut += rebuilt.remaining();
            pass.output.add(rebuilt);
        }
        return pass;
    }

    private static String verify(Path file) throws Exception {
        ByteBuffer bytes = ByteBuffer.wrap(Files.readAllBytes(file));
        MessageDigest digest = MessageDigest.getInstance("SHA-256");
        BufferSupplier buffers = BufferSupplier.create();
        TreeSet<String> codecs = new TreeSet<>();
        long batches = 0;
        long records = 0;
        long consumed = 0;
        for (MutableRecordBatch batch : MemoryRecords.readableRecords(bytes).batches()) {
            batch.ensureValid();
            consumed += batch.sizeInBytes();
            batches++;
            codecs.add(batch.compressionType().name);
            try (CloseableIterator<Record> it = batch.streamingIterator(buffers)) {
                while (it.hasNext()) {
                    Record record = it.next();
                    record.ensureValid();
                    records++;
                    ByteBuffer value = record.value();
                    int size = value == null ? -1 : value.remaining();
                    digest.update(ByteBuffer.allocate(4).putInt(size).array());
                    if (value != null) {
                        digest.update(value);
                    }
                }
            }
        }
        if (consumed != bytes.limit()) {
            throw new IllegalStateException(
                    file + ": " + (bytes.limit() - consumed) + " trailing bytes are no whole batch");
        }
        StringBuilder hex = new StringBuilder();
        for (byte b : digest.digest()) {
            hex.append(String.format("%02x", b));
        }
        return String.format(
                "verified batches=%d records=%d codecs=%s sha256=%s",
                batches, records, String.join(",", codecs), hex);
    }
}
