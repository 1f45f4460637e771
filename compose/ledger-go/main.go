// The compose stack's ledger in Go (grpc-go from Debian's packages): a service the harness cannot change,
// drilled through `drill proxy` in front of it (compose/ledger-go.yml).
//
// It serves drill.v1.Demo/Call and /Write as the Python ledger does (`drill serve --work-ms 8 --concurrency 1
// --queue 32`): CONCURRENCY calls at a time, WORK_MS each, QUEUE more waiting, RESOURCE_EXHAUSTED beyond;
// the reply echoes the payload, names this instance and appends SERVICE to the path. grpc.health.v1 Check
// answers SERVING, for the compose healthcheck through the proxy. Messages are parsed by hand from the
// wire (three fields), so no generated code and no module download: it builds offline in GOPATH mode.
// Connections end after MAX_CONNECTION_AGE_MS (GOAWAY, calls in flight finish), so a proxy in front
// resolves the name again and finds replicas added later.
//
// Usage: ledger-go [-host 127.0.0.1] [-port 50051] [-service ledger] [-work-ms 8] [-concurrency 1] [-queue 32]
//
//	[-max-connection-age-ms 10000]
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// rawCodec hands handlers the bytes on the wire (grpc.CustomCodec: the server's one codec), so no proto
// package is needed.
type rawCodec struct{}

func (rawCodec) Marshal(v interface{}) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v interface{}) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string   { return "proto" }
func (rawCodec) String() string { return "proto" }

func putVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func putString(b []byte, field byte, s string) []byte {
	b = putVarint(append(b, field<<3|2), uint64(len(s)))
	return append(b, s...)
}

func varint(b []byte) (uint64, int, error) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return v, i + 1, nil
		}
	}
	return 0, 0, fmt.Errorf("bad varint")
}

// request is drill.v1.CallRequest: payload = 1, work_ms = 2 (extra work asked by the caller).
type request struct {
	payload string
	workMs  int64
}

func parse(b []byte) (request, error) {
	var r request
	for len(b) > 0 {
		key, n, err := varint(b)
		if err != nil {
			return r, err
		}
		b = b[n:]
		field, wire := key>>3, key&7
		switch wire {
		case 0:
			v, n, err := varint(b)
			if err != nil {
				return r, err
			}
			b = b[n:]
			if field == 2 {
				r.workMs = int64(int32(v))
			}
		case 1:
			if len(b) < 8 {
				return r, fmt.Errorf("bad fixed64")
			}
			b = b[8:]
		case 2:
			l, n, err := varint(b)
			if err != nil || uint64(len(b)-n) < l {
				return r, fmt.Errorf("bad length")
			}
			if field == 1 {
				r.payload = string(b[n : n+int(l)])
			}
			b = b[n+int(l):]
		case 5:
			if len(b) < 4 {
				return r, fmt.Errorf("bad fixed32")
			}
			b = b[4:]
		default:
			return r, fmt.Errorf("wire type %d", wire)
		}
	}
	return r, nil
}

type ledger struct {
	service  string
	instance string
	work     time.Duration
	slots    chan struct{}
	queue    int64
	waiting  int64
}

// serve admits the call (a slot, else a queue place, else RESOURCE_EXHAUSTED), works, and replies.
func (l *ledger) serve(ctx context.Context, in []byte) ([]byte, error) {
	req, err := parse(in)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%s: %v", l.service, err)
	}
	select {
	case l.slots <- struct{}{}:
	default:
		if atomic.AddInt64(&l.waiting, 1) > l.queue {
			atomic.AddInt64(&l.waiting, -1)
			return nil, status.Errorf(codes.ResourceExhausted, "%s overloaded", l.service)
		}
		select {
		case l.slots <- struct{}{}:
			atomic.AddInt64(&l.waiting, -1)
		case <-ctx.Done():
			atomic.AddInt64(&l.waiting, -1)
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	defer func() { <-l.slots }()
	work := l.work
	if req.workMs > 0 {
		work += time.Duration(req.workMs) * time.Millisecond
	}
	select {
	case <-time.After(work):
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	var out []byte
	out = putString(out, 1, req.payload)
	out = putString(out, 2, l.instance)
	out = putString(out, 3, l.service)
	return out, nil
}

func unary(serve func(context.Context, []byte) ([]byte, error)) func(interface{}, grpc.ServerStream) error {
	return func(_ interface{}, stream grpc.ServerStream) error {
		var in []byte
		if err := stream.RecvMsg(&in); err != nil {
			return err
		}
		out, err := serve(stream.Context(), in)
		if err != nil {
			return err
		}
		return stream.SendMsg(&out)
	}
}

// healthCheck is grpc.health.v1.Health/Check: SERVING (status = 1) for the server and every name.
func healthCheck(context.Context, []byte) ([]byte, error) { return []byte{0x08, 0x01}, nil }

func main() {
	host := flag.String("host", "127.0.0.1", "address to listen on (0.0.0.0 in a container)")
	port := flag.Int("port", 50051, "port to listen on")
	service := flag.String("service", "ledger", "the name this service puts in a reply's path")
	workMs := flag.Int("work-ms", 8, "work per call, in ms")
	concurrency := flag.Int("concurrency", 1, "calls served at once")
	queue := flag.Int64("queue", 32, "calls waiting for a slot before RESOURCE_EXHAUSTED")
	maxAgeMs := flag.Int("max-connection-age-ms", 10000, "end each connection after this long (0: never)")
	flag.Parse()
	if *concurrency < 1 || *queue < 0 || *workMs < 0 || *maxAgeMs < 0 {
		fmt.Fprintln(os.Stderr, "ledger-go: -concurrency must be at least 1; -queue, -work-ms, -max-connection-age-ms not negative")
		os.Exit(2)
	}
	hostname, _ := os.Hostname()
	l := &ledger{service: *service, instance: fmt.Sprintf("%s@%s", *service, hostname),
		work: time.Duration(*workMs) * time.Millisecond, slots: make(chan struct{}, *concurrency), queue: *queue}
	opts := []grpc.ServerOption{grpc.CustomCodec(rawCodec{})}
	if *maxAgeMs > 0 {
		age := time.Duration(*maxAgeMs) * time.Millisecond
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: age, MaxConnectionAgeGrace: 5 * time.Second}))
	}
	server := grpc.NewServer(opts...)
	var impl interface{}
	server.RegisterService(&grpc.ServiceDesc{
		ServiceName: "drill.v1.Demo",
		HandlerType: (*interface{})(nil),
		Streams: []grpc.StreamDesc{
			{StreamName: "Call", Handler: unary(l.serve)},
			{StreamName: "Write", Handler: unary(l.serve)},
		},
	}, &impl)
	server.RegisterService(&grpc.ServiceDesc{
		ServiceName: "grpc.health.v1.Health",
		HandlerType: (*interface{})(nil),
		Streams:     []grpc.StreamDesc{{StreamName: "Check", Handler: unary(healthCheck)}},
	}, &impl)
	lis, err := net.Listen("tcp", net.JoinHostPort(*host, fmt.Sprint(*port)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledger-go:", err)
		os.Exit(1)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		server.GracefulStop()
	}()
	fmt.Fprintf(os.Stderr, "ledger-go: %s serving on %s\n", *service, lis.Addr())
	if err := server.Serve(lis); err != nil {
		fmt.Fprintln(os.Stderr, "ledger-go:", err)
		os.Exit(1)
	}
}
