// Seed 002's echo server: reads a line, writes it back, on one connection at a time.
// As published, with what the lab needs to run it unattended: the address, the port and
// the number of connections to serve come from the command line, a closed connection
// ends its loop, and the first line out says the server is listening.
import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;

public class Server {
    public static void main(String[] args) throws Exception {
        String address = args[0];
        int port = Integer.parseInt(args[1]);
        int connections = Integer.parseInt(args[2]);
        warmUp();
        ServerSocket serverSocket = new ServerSocket();
        serverSocket.bind(new InetSocketAddress(address, port));
        System.out.println("Server startup at " + port);
        System.out.flush();
        for (int c = 0; c < connections; c++) {
            Socket socket = serverSocket.accept();
            socket.setSoTimeout(10000);
            InputStream in = socket.getInputStream();
            OutputStream out = socket.getOutputStream();
            while (true) {
                try {
                    BufferedReader reader = new BufferedReader(new InputStreamReader(in));
                    String line = reader.readLine();
                    if (line == null) {
                        break;
                    }
                    out.write((line + "\n").getBytes());
                }
                catch (Exception e) {
                    break;
                }
            }
            socket.close();
        }
        serverSocket.close();
    }

    // The reading and writing code runs once before the first connection, so loading
    // its classes does not add to the first round trip.
    static void warmUp() throws Exception {
        BufferedReader reader = new BufferedReader(new InputStreamReader(
            new ByteArrayInputStream("hello world\n".getBytes())));
        String line = reader.readLine();
        (line + "\n").getBytes();
    }
}
