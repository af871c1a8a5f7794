// Seed 004's server: HTTP/1.1 with keep-alive, each response written as its headers and
// then its body, two calls. Reads requests up to the blank line, answers each with 180
// bytes of headers and a 320-byte body (the sizes of scenarios/seed004-ab-keepalive.toml),
// and serves the given number of connections. The first line out says it is listening.
import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;

public class KeepAliveServer {
    static final int HEADERS = 180;
    static final int BODY = 320;

    public static void main(String[] args) throws Exception {
        String address = args[0];
        int port = Integer.parseInt(args[1]);
        int connections = Integer.parseInt(args[2]);
        byte[] body = new byte[BODY];
        for (int i = 0; i < BODY; i++) {
            body[i] = (byte) ('a' + i % 26);
        }
        byte[] headers = headers(BODY);
        warmUp(headers);
        ServerSocket serverSocket = new ServerSocket();
        serverSocket.bind(new InetSocketAddress(address, port));
        System.out.println("KeepAliveServer startup at " + port);
        System.out.flush();
        for (int c = 0; c < connections; c++) {
            Socket socket = serverSocket.accept();
            socket.setSoTimeout(10000);
            InputStream in = socket.getInputStream();
            OutputStream out = socket.getOutputStream();
            try {
                while (readRequest(in) != null) {
                    out.write(headers);
                    out.write(body);
                }
            }
            catch (Exception e) {
                // The client went away: serve the next connection.
            }
            socket.close();
        }
        serverSocket.close();
    }

    // "HTTP/1.1 200 OK" and its headers, padded with a comment-like header to HEADERS bytes.
    static byte[] headers(int length) {
        String head = "HTTP/1.1 200 OK\r\nServer: keepalive\r\nContent-Type: text/plain\r\n"
            + "Connection: keep-alive\r\nContent-Length: " + length + "\r\n";
        String pad = "X-Pad: ";
        int fill = HEADERS - head.length() - pad.length() - 4;
        StringBuilder text = new StringBuilder(head).append(pad);
        for (int i = 0; i < fill; i++) {
            text.append('.');
        }
        text.append("\r\n\r\n");
        return text.toString().getBytes(StandardCharsets.US_ASCII);
    }

    // One request's head, up to and including its blank line; null at the end of input.
    static String readRequest(InputStream in) throws Exception {
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
        return head.toString(StandardCharsets.US_ASCII);
    }

    static void warmUp(byte[] headers) throws Exception {
        readRequest(new java.io.ByteArrayInputStream(headers));
    }
}
