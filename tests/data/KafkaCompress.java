// Compresses Kafka record sections the way Kafka's Java producer does, with the libraries it uses:
// java.util.zip for gzip, xerial's snappy-java (its stream framing), zstd-jni's no-finalizer stream at
// Kafka's default level 3, and lz4-java's frame stream. Run as a single source file:
//   java -cp <snappy-java.jar>:<zstd-jni.jar>:<lz4-java.jar> KafkaCompress.java CODEC IN OUT [CODEC IN OUT]...
// tests/test_codec.py uses it as an implementation of the codecs independent of the project's own.
import java.io.BufferedOutputStream;
import java.io.FileOutputStream;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.zip.GZIPOutputStream;

public class KafkaCompress {
    static OutputStream wrap(String codec, OutputStream out) throws Exception {
        switch (codec) {
            case "gzip":
                return new BufferedOutputStream(new GZIPOutputStream(out, 8 * 1024), 16 * 1024);
            case "snappy":
                return new org.xerial.snappy.SnappyOutputStream(out);
            case "zstd":
                return new BufferedOutputStream(new com.github.luben.zstd.ZstdOutputStreamNoFinalizer(
                    out, com.github.luben.zstd.RecyclingBufferPool.INSTANCE, 3), 16 * 1024);
            case "lz4":
                return new net.jpountz.lz4.LZ4FrameOutputStream(out);
            default:
                throw new IllegalArgumentException("unknown codec " + codec);
        }
    }

    public static void main(String[] args) throws Exception {
        for (int i = 0; i + 2 < args.length; i += 3) {
            byte[] section = Files.readAllBytes(Paths.get(args[i + 1]));
            try (OutputStream out = wrap(args[i], new FileOutputStream(args[i + 2]))) {
                out.write(section);
            }
        }
    }
}
