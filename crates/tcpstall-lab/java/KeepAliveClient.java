// A keep-alive HTTP client in the manner of `ab -k -c 1`: one connection, each GET in
// one write, each response read to its Content-Length, and each request timed from its
// write to its last byte, printed like seed 002's client: "RTT:ms ,receive:... ,start:ns".
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Instant;

public class KeepAliveClient {
    public static void main(String[] args) throws Exception {
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        int count = Integer.parseInt(args[2]);
        byte[] request = ("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\nHost: " + host
            + "\r\nUser-Agent: ApacheBench/2.3\r\nAccept: */*\r\n\r\n")
            .getBytes(StandardCharsets.US_ASCII);
        warmUp();
        Socket socket = new Socket();
        socket.setSoTimeout(10000);
        socket.connect(new InetSocketAddress(host, port), 10000);
        InputStream in = socket.getInputStream();
        OutputStream out = socket.getOutputStream();
        for (int i = 0; i < count; i++) {
            // The monotonic label first: a pause between the two calls then widens the
            // round trip's wall-clock window (start + RTT) instead of cutting its end short.
            long label = System.nanoTime();
            Instant start = Instant.now();
            out.write(request);
            String status = readResponse(in);
            long nanos = System.nanoTime() - label;
            if (status == null) {
                System.out.println("closed after " + i + " requests");
                break;
            }
            System.out.println("RTT:" + millis(nanos) + " ,receive:" + status
                + " ,start:" + epochNanos(start));
        }
        socket.close();
    }

    // Reads one response (its head, then Content-Length bytes of body); returns its
    // status line and body length, or null at the end of input.
    static String readResponse(InputStream in) throws Exception {
        ByteArrayOutputStream head = new ByteArrayOutputStream();
        int state = 0;
        while (state < 4) {
            int b = in.read();
            if (b < 0) {
                return null;
            }
            head.write(b);
            boolean cr = b == '\r';
            state = (cr && (state == 0 || state == 2)) ? state + 1
                : (b == '\n' && (state == 1 || state == 3)) ? state + 1
                : cr ? 1 : 0;
        }
        String text = head.toString(StandardCharsets.US_ASCII);
        int length = 0;
        for (String line : text.split("\r\n")) {
            if (line.toLowerCase().startsWith("content-length:")) {
                length = Integer.parseInt(line.substring(15).trim());
            }
        }
        for (int got = 0; got < length; got++) {
            if (in.read() < 0) {
                return null;
            }
        }
        return text.substring(0, text.indexOf("\r\n")) + " " + length + " bytes";
    }

    static String millis(long nanos) {
        return String.format("%d.%06d", nanos / 1000000, nanos % 1000000);
    }

    static String epochNanos(Instant at) {
        return String.format("%d%09d", at.getEpochSecond(), at.getNano());
    }

    // The timed code runs once before connecting, so loading its classes does not add
    // to the first request.
    static void warmUp() throws Exception {
        String response = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        // The monotonic label first: a pause between the two calls then widens the
        // round trip's wall-clock window (start + RTT) instead of cutting its end short.
        long label = System.nanoTime();
        Instant start = Instant.now();
        String status = readResponse(new ByteArrayInputStream(
            response.getBytes(StandardCharsets.US_ASCII)));
        String text = "RTT:" + millis(System.nanoTime() - label) + " ,receive:" + status
            + " ,start:" + epochNanos(start);
        text.length();
    }
}
