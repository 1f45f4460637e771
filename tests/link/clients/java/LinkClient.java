/*
 * A grpc-java client for the link's tests (tests/link/test_languages.py): raw bytes through a byte-array
 * Marshaller, no generated code, on Debian's grpc-java 1.41 (libgrpc-java) and Netty (libnetty-java).
 *
 *   java -cp CLASSES:JARS LinkClient HOST:PORT KEEPALIVE_TIME_MS KEEPALIVE_TIMEOUT_MS [noretry]
 *
 * (0 0: no keepalive; noretry: the channel built with disableRetry(), which also ends transparent retries)
 *
 * Each line on stdin starts one call at once: ID TAB METHOD TAB DEADLINE_MS TAB TENANT ("-": none) TAB PAYLOAD;
 * each call that ends writes one JSON line on stdout: {"id", "code" (status name), "ms" (from its start), "reply"
 * (when OK), "details"}. Stdin's end shuts the channel down once the calls ended.
 */

import io.grpc.CallOptions;
import io.grpc.ClientCall;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.netty.NettyChannelBuilder;
import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.Phaser;
import java.util.concurrent.TimeUnit;

public final class LinkClient {
  static final class Bytes implements MethodDescriptor.Marshaller<byte[]> {
    @Override
    public InputStream stream(byte[] value) {
      return new ByteArrayInputStream(value);
    }

    @Override
    public byte[] parse(InputStream stream) {
      try {
        return stream.readAllBytes();
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
  }

  static final Metadata.Key<String> TENANT = Metadata.Key.of("x-tenant-id", Metadata.ASCII_STRING_MARSHALLER);

  static String quote(String s) {
    StringBuilder out = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      if (c == '"' || c == '\\') out.append('\\').append(c);
      else if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
      else out.append(c);
    }
    return out.append('"').toString();
  }

  static synchronized void emit(String line) {
    System.out.println(line);
    System.out.flush();
  }

  public static void main(String[] args) throws Exception {
    long keepaliveMs = Long.parseLong(args[1]);
    long timeoutMs = Long.parseLong(args[2]);
    NettyChannelBuilder builder = NettyChannelBuilder.forTarget(args[0]).usePlaintext()
        .maxInboundMessageSize(64 << 20);
    if (keepaliveMs > 0) {
      builder.keepAliveTime(keepaliveMs, TimeUnit.MILLISECONDS)
          .keepAliveTimeout(timeoutMs, TimeUnit.MILLISECONDS)
          .keepAliveWithoutCalls(true);
    }
    if (args.length > 3 && args[3].equals("noretry")) builder.disableRetry();
    ManagedChannel channel = builder.build();
    Bytes bytes = new Bytes();
    Phaser pending = new Phaser(1);
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    for (String line; (line = in.readLine()) != null; ) {
      if (line.isEmpty()) continue;
      String[] f = line.split("\t", 5);
      String id = f[0];
      MethodDescriptor<byte[], byte[]> method = MethodDescriptor.<byte[], byte[]>newBuilder()
          .setType(MethodDescriptor.MethodType.UNARY)
          .setFullMethodName(MethodDescriptor.generateFullMethodName("echo.Echo", f[1]))
          .setRequestMarshaller(bytes).setResponseMarshaller(bytes).build();
      ClientCall<byte[], byte[]> call = channel.newCall(
          method, CallOptions.DEFAULT.withDeadlineAfter(Long.parseLong(f[2]), TimeUnit.MILLISECONDS));
      Metadata headers = new Metadata();
      if (!f[3].equals("-")) headers.put(TENANT, f[3]);
      long start = System.nanoTime();
      pending.register();
      call.start(new ClientCall.Listener<byte[]>() {
        byte[] reply;

        @Override
        public void onMessage(byte[] message) {
          reply = message;
        }

        @Override
        public void onClose(Status status, Metadata trailers) {
          double ms = (System.nanoTime() - start) / 1e6;
          StringBuilder out = new StringBuilder("{\"id\": ").append(quote(id))
              .append(", \"code\": ").append(quote(status.getCode().name())).append(", \"ms\": ").append(ms);
          if (status.isOk() && reply != null) {
            out.append(", \"reply\": ").append(quote(new String(reply, StandardCharsets.UTF_8)));
          }
          if (status.getDescription() != null) out.append(", \"details\": ").append(quote(status.getDescription()));
          emit(out.append('}').toString());
          pending.arriveAndDeregister();
        }
      }, headers);
      call.request(2);
      call.sendMessage(f[4].getBytes(StandardCharsets.UTF_8));
      call.halfClose();
    }
    pending.arriveAndAwaitAdvance();
    channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);  // every call has ended
  }
}
