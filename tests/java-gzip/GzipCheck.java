import java.io.*;
import java.nio.file.*;
import java.util.*;
import java.util.zip.*;

/**
 * The JDK's own gzip, as Kafka's Java client uses it, against kpress's providers.
 *
 *   java GzipCheck.java read DIR          every DIR/NAME.gz must inflate to DIR/NAME.raw's bytes
 *   java GzipCheck.java write RAW OUT LVL  OUT = RAW gzipped the way Kafka's producer does it
 */
public class GzipCheck {
    public static void main(String[] args) throws Exception {
        if (args[0].equals("read")) {
            int failures = 0, checked = 0;
            try (DirectoryStream<Path> gzs = Files.newDirectoryStream(Paths.get(args[1]), "*.gz")) {
                for (Path gz : gzs) {
                    String name = gz.getFileName().toString();
                    String raw = name.substring(0, name.indexOf('@')) + ".raw";
                    byte[] expected = Files.readAllBytes(gz.resolveSibling(raw));
                    byte[] actual;
                    try (InputStream in = new GZIPInputStream(new ByteArrayInputStream(Files.readAllBytes(gz)), 8192)) {
                        actual = in.readAllBytes();
                    }
                    checked++;
                    if (!Arrays.equals(expected, actual)) {
                        failures++;
                        System.out.println("FAIL " + name);
                    }
                }
            }
            System.out.println("checked " + checked + ", failed " + failures);
            System.exit(failures == 0 && checked > 0 ? 0 : 1);
        } else {
            byte[] raw = Files.readAllBytes(Paths.get(args[1]));
            int level = Integer.parseInt(args[3]);
            // Kafka's GzipOutputStream: an 8 KiB deflater buffer at the configured level,
            // behind a 16 KiB buffered writer.
            try (OutputStream out = new BufferedOutputStream(new GZIPOutputStream(new FileOutputStream(args[2]), 8 * 1024) {
                    { def.setLevel(level); }
                }, 16 * 1024)) {
                out.write(raw);
            }
        }
    }
}
