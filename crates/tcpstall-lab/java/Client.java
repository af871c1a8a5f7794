// Seed 002's client: sends "hello " and "world\n" in two writes (or one), reads the line
// back, and prints each round trip. As published, with what the lab needs: the port and
// the number of round trips come from the command line, each round trip is timed with
// System.nanoTime (the seed prints whole milliseconds), and each line also gives the
// round trip's start on the wall clock (epoch nanoseconds) to place it in a capture.
import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.time.Instant;

public class Client {
    public static void main(String[] args) throws Exception {
        // Whether to write head and body separately
        boolean writeSplit = false;
        String host = "localhost";
        int port = 8000;
        int count = 10;
        if (args.length >= 1) {
            host = args[0];
        }
        if (args.length >= 2) {
            writeSplit = Boolean.valueOf(args[1]);
        }
        if (args.length >= 3) {
            port = Integer.parseInt(args[2]);
        }
        if (args.length >= 4) {
            count = Integer.parseInt(args[3]);
        }
        System.out.println("WriteSplit:" + writeSplit);
        warmUp();
        Socket socket = new Socket();
        socket.setSoTimeout(10000);
        socket.connect(new InetSocketAddress(host, port), 10000);
        InputStream in = socket.getInputStream();
        OutputStream out = socket.getOutputStream();
        BufferedReader reader = new BufferedReader(new InputStreamReader(in));
        String head = "hello ";
        String body = "world\n";
        for (int i = 0; i < count; i++) {
            // The monotonic label first: a pause between the two calls then widens the
            // round trip's wall-clock window (start + RTT) instead of cutting its end short.
            long label = System.nanoTime();
            Instant start = Instant.now();
            if (writeSplit) {
                out.write(head.getBytes());
                out.write(body.getBytes());
            }
            else {
                out.write((head + body).getBytes());
            }
            String line = reader.readLine();
            long nanos = System.nanoTime() - label;
            System.out.println("RTT:" + millis(nanos) + " ,receive:" + line
                + " ,start:" + epochNanos(start));
        }
        in.close();
        out.close();
        socket.close();
    }

    static String millis(long nanos) {
        return String.format("%d.%06d", nanos / 1000000, nanos % 1000000);
    }

    static String epochNanos(Instant at) {
        return String.format("%d%09d", at.getEpochSecond(), at.getNano());
    }

    // The timed code runs once before connecting, so loading its classes does not add
    // to the first round trip.
    static void warmUp() throws Exception {
        BufferedReader reader = new BufferedReader(new InputStreamReader(
            new ByteArrayInputStream("hello world\n".getBytes())));
        String line = reader.readLine();
        // The monotonic label first: a pause between the two calls then widens the
        // round trip's wall-clock window (start + RTT) instead of cutting its end short.
        long label = System.nanoTime();
        Instant start = Instant.now();
        ("hello " + "world\n").getBytes();
        String text = "RTT:" + millis(System.nanoTime() - label) + " ,receive:" + line
            + " ,start:" + epochNanos(start);
        text.length();
    }
}
