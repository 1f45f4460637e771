// gohop: a gRPC service in Go for drilling a fleet that is not Python (issue 47). grpc-go and OpenTelemetry Go
// from Debian's packages (golang-google-grpc-dev, golang-opentelemetry-otel-dev), built offline in GOPATH mode by
// harness/fleet/build.py. It has no drill code: what a drill needs from it is what any service instrumented with
// OpenTelemetry does, carry W3C baggage from its incoming call to its outgoing one.
//
// Two modes:
//   - forward (-upstream HOST:PORT): every method, as bytes (an unknown-service handler and a raw codec), to the
//     upstream, on a channel configured by -service-config (a grpc-go JSON service config: retryPolicy,
//     retryThrottling; grpc-go 1.33 reads GRPC_GO_RETRY=on at start, so the program re-executes itself with it
//     set). The incoming deadline is kept (grpc-go sends what is left as grpc-timeout); status, details, headers
//     and trailers are relayed. With -propagate otel (default) the incoming baggage and traceparent are extracted
//     and injected on the upstream call by OpenTelemetry Go's composite propagator (no other metadata is
//     forwarded: the x-* drill keys are not); with -propagate none nothing is.
//   - leaf (no -upstream): answers every call with an empty message after -work-ms, at most -concurrency at once
//     and -queue waiting; beyond that RESOURCE_EXHAUSTED at once. Work that started is finished even if the
//     caller has gone (its capacity is spent, as a real service's is).
//
// grpc.health.v1 is served. -log FILE: one JSON line per call (method, code, request id and tenant as this hop
// saw them: the x-* keys, else the drill.* baggage entries). Ready: prints "ready" and writes -ready-file.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The drill's baggage names for the two values the log shows (harness/core/headers.py spells them all).
const (
	baggageTenant    = "drill.tenant"
	baggageRequestID = "drill.request-id"
)

// rawCodec passes *[]byte messages as they are on the wire and anything else (the health service's messages)
// to the proto codec it replaces.
type rawCodec struct{ proto encoding.Codec }

func (c rawCodec) Marshal(v interface{}) ([]byte, error) {
	if b, ok := v.(*[]byte); ok {
		return *b, nil
	}
	return c.proto.Marshal(v)
}

func (c rawCodec) Unmarshal(data []byte, v interface{}) error {
	if b, ok := v.(*[]byte); ok {
		*b = append([]byte(nil), data...)
		return nil
	}
	return c.proto.Unmarshal(data, v)
}

func (rawCodec) Name() string { return "proto" }

// mdCarrier is gRPC metadata as OpenTelemetry's TextMapCarrier (keys are lower case in gRPC metadata).
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

type logger struct {
	mu   sync.Mutex
	file *os.File
	name string
}

func (l *logger) line(method string, code codes.Code, md metadata.MD, start time.Time) {
	if l.file == nil {
		return
	}
	c := mdCarrier(md)
	requestID, tenant := c.Get("x-request-id"), c.Get("x-tenant-id")
	if requestID == "" && tenant == "" {
		// what this hop saw in baggage (values decoded as the W3C spec says)
		if b, err := baggage.Parse(c.Get("baggage")); err == nil {
			requestID = unescape(b.Member(baggageRequestID).Value())
			tenant = unescape(b.Member(baggageTenant).Value())
		}
	}
	attempt, _ := strconv.Atoi(c.Get("grpc-previous-rpc-attempts"))
	out, _ := json.Marshal(map[string]interface{}{
		"hop": l.name, "method": method, "code": codeNames[code], "request_id": requestID, "tenant": tenant,
		"attempt": attempt, "ms": float64(time.Since(start).Microseconds()) / 1000,
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.file.Write(append(out, '\n'))
}

// codeNames: the status names as every gRPC spec spells them (Go's String() says ResourceExhausted).
var codeNames = map[codes.Code]string{
	codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN", codes.InvalidArgument: "INVALID_ARGUMENT",
	codes.DeadlineExceeded: "DEADLINE_EXCEEDED", codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
	codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED", codes.OutOfRange: "OUT_OF_RANGE",
	codes.Unimplemented: "UNIMPLEMENTED", codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE",
	codes.DataLoss: "DATA_LOSS", codes.Unauthenticated: "UNAUTHENTICATED",
}

func unescape(v string) string {
	if u, err := url.PathUnescape(v); err == nil {
		return u
	}
	return v
}

type hop struct {
	log       *logger
	upstream  *grpc.ClientConn
	propagate bool
	prop      propagation.TextMapPropagator
	// leaf
	work     time.Duration
	slots    chan struct{}
	admitted int64
	limit    int64
}

func (h *hop) handle(_ interface{}, ss grpc.ServerStream) error {
	start := time.Now()
	method, _ := grpc.MethodFromServerStream(ss)
	md, _ := metadata.FromIncomingContext(ss.Context())
	var err error
	if h.upstream != nil {
		err = h.forward(method, md, ss)
	} else {
		err = h.leaf(ss)
	}
	h.log.line(method, status.Code(err), md, start)
	return err
}

func (h *hop) leaf(ss grpc.ServerStream) error {
	if atomic.AddInt64(&h.admitted, 1) > h.limit {
		atomic.AddInt64(&h.admitted, -1)
		return status.Error(codes.ResourceExhausted, "leaf over capacity")
	}
	defer atomic.AddInt64(&h.admitted, -1)
	var req []byte
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	select {
	case h.slots <- struct{}{}:
	case <-ss.Context().Done():
		return status.FromContextError(ss.Context().Err()).Err()
	}
	time.Sleep(h.work) // the work is done whether or not the caller still waits
	<-h.slots
	if err := ss.Context().Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	empty := []byte{}
	return ss.SendMsg(&empty)
}

func (h *hop) forward(method string, md metadata.MD, ss grpc.ServerStream) error {
	ctx, cancel := context.WithCancel(ss.Context()) // keeps the caller's deadline and cancel
	defer cancel()
	out := metadata.MD{}
	if h.propagate {
		h.prop.Inject(h.prop.Extract(ctx, mdCarrier(md)), mdCarrier(out))
	}
	ctx = metadata.NewOutgoingContext(ctx, out)
	desc := &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}
	cs, err := h.upstream.NewStream(ctx, desc, method)
	if err != nil {
		return err
	}
	go func() { // caller -> upstream
		for {
			var m []byte
			if err := ss.RecvMsg(&m); err != nil {
				if err == io.EOF {
					cs.CloseSend()
				} else {
					cancel()
				}
				return
			}
			if err := cs.SendMsg(&m); err != nil {
				return // the upstream's status comes from RecvMsg below
			}
		}
	}()
	sentHeader := false
	for {
		var m []byte
		err := cs.RecvMsg(&m)
		if !sentHeader {
			if hdr, herr := cs.Header(); herr == nil && len(hdr) > 0 {
				ss.SendHeader(hdr)
			}
			sentHeader = true
		}
		if err != nil {
			ss.SetTrailer(cs.Trailer())
			if err == io.EOF {
				return nil
			}
			return err
		}
		if err := ss.SendMsg(&m); err != nil {
			return err
		}
	}
}

// withRetries re-executes the program with GRPC_GO_RETRY=on: grpc-go 1.33 reads it once, at start.
func withRetries() {
	if os.Getenv("GRPC_GO_RETRY") == "on" {
		return
	}
	exe, err := os.Executable()
	if err == nil {
		err = syscall.Exec(exe, os.Args, append(os.Environ(), "GRPC_GO_RETRY=on"))
	}
	fmt.Fprintf(os.Stderr, "gohop: cannot re-execute with GRPC_GO_RETRY=on: %v\n", err)
	os.Exit(1)
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "gohop: "+format+"\n", args...)
	os.Exit(2)
}

func main() {
	port := flag.Int("port", 0, "port on 127.0.0.1 (0: one the kernel picks)")
	portFile := flag.String("port-file", "", "write the bound port here")
	readyFile := flag.String("ready-file", "", "write the port here once serving")
	logPath := flag.String("log", "", "one JSON line per call")
	name := flag.String("name", "gohop", "this hop's name in its log")
	upstream := flag.String("upstream", "", "HOST:PORT to forward every call to (absent: leaf)")
	serviceConfig := flag.String("service-config", "", "grpc-go JSON service config for the upstream channel")
	propagate := flag.String("propagate", "otel", "otel (W3C baggage + tracecontext) or none")
	workMs := flag.Int("work-ms", 10, "leaf: time each call takes")
	concurrency := flag.Int("concurrency", 8, "leaf: calls worked on at once")
	queue := flag.Int("queue", 16, "leaf: calls waiting beyond those; more get RESOURCE_EXHAUSTED")
	flag.Parse()
	if *propagate != "otel" && *propagate != "none" {
		fail("-propagate is otel or none, not %q", *propagate)
	}
	if *concurrency < 1 || *queue < 0 || *workMs < 0 {
		fail("-concurrency must be >= 1, -queue and -work-ms >= 0")
	}
	var config string
	if *serviceConfig != "" {
		if *upstream == "" {
			fail("-service-config needs -upstream")
		}
		raw, err := os.ReadFile(*serviceConfig)
		if err != nil {
			fail("%v", err)
		}
		if !json.Valid(raw) {
			fail("%s is not JSON", *serviceConfig)
		}
		config = string(raw)
		withRetries()
	}
	encoding.RegisterCodec(rawCodec{proto: encoding.GetCodec("proto")})

	h := &hop{
		log:       &logger{name: *name},
		propagate: *propagate == "otel",
		prop:      propagation.NewCompositeTextMapPropagator(propagation.Baggage{}, propagation.TraceContext{}),
		work:      time.Duration(*workMs) * time.Millisecond,
		slots:     make(chan struct{}, *concurrency),
		limit:     int64(*concurrency + *queue),
	}
	if *logPath != "" {
		f, err := os.OpenFile(*logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fail("%v", err)
		}
		h.log.file = f
	}
	if *upstream != "" {
		opts := []grpc.DialOption{grpc.WithInsecure()}
		if config != "" {
			opts = append(opts, grpc.WithDefaultServiceConfig(config))
		}
		cc, err := grpc.Dial(*upstream, opts...)
		if err != nil {
			fail("-upstream %s: %v", *upstream, err)
		}
		h.upstream = cc
	}
	lis, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		fmt.Fprintf(os.Stderr, "gohop: %v\n", err)
		os.Exit(1)
	}
	server := grpc.NewServer(grpc.UnknownServiceHandler(h.handle))
	healthpb.RegisterHealthServer(server, health.NewServer())
	bound := strconv.Itoa(lis.Addr().(*net.TCPAddr).Port)
	for _, path := range []string{*portFile, *readyFile} {
		if path == "" {
			continue
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(bound), 0o644); err == nil {
			os.Rename(tmp, path) // only a whole file is ever found
		}
	}
	fmt.Println("ready")
	if err := server.Serve(lis); err != nil {
		fmt.Fprintf(os.Stderr, "gohop: %v\n", err)
		os.Exit(1)
	}
}
