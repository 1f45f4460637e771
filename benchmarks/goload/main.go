// goload: an open-loop gRPC load generator in Go (grpc-go from Debian's packages), for benchmarks/proxy_overload.py.
//
// It sends unary calls at a fixed rate whatever the answers do: call i leaves at start + i/rate on its own
// goroutine, with its own deadline, so a slow or refusing server never slows the sender (a closed loop would
// hide an overload by sending less). Calls go round robin over -conns connections, each set up before the
// clock starts. The request is a probe.v1.Msg (tests/proxy/probe.proto) written by hand: id = 1, body = 2,
// mode = 4; no generated code, the message passes as bytes.
//
// Once every call has ended (each within its deadline) it prints one JSON object on stdout: the calls sent,
// how far the sender fell behind its schedule, the time from the first call to the last answer, the count per
// status code, latency percentiles (ms) of the calls of each status, and (-within MS) how many OK calls were
// answered within MS, the count of calls per x-drill-fault trailer (the fault the server side injected), and
// per failing status the first message seen.
//
// With -fault DIRECTIVE every call carries the drill's keys (x-tenant-id, x-fault, x-fault-ratio, and its own
// x-request-id, goload-I), for what a fault costs the plane that injects it (benchmarks/call_fault_planes.py).
//
// Usage: goload -addr 127.0.0.1:PORT -rate 3000 -seconds 10 -timeout 1 [-conns 4] [-method /probe.v1.Probe/Echo]
//
//	[-fault abort:UNAVAILABLE -ratio 50 -tenant tenant-drill]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Upper bounds: a typo must not start a load that runs for hours or holds millions of goroutines.
const (
	maxRate    = 100000.0
	maxSeconds = 600.0
	maxTimeout = 60.0
	maxConns   = 64
)

type bytesCodec struct{}

func (bytesCodec) Marshal(v interface{}) ([]byte, error) { return *(v.(*[]byte)), nil }
func (bytesCodec) Unmarshal(data []byte, v interface{}) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (bytesCodec) Name() string { return "proto" }

func field(b []byte, key byte, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = append(b, key)
	n := uint64(len(v))
	for n >= 0x80 {
		b = append(b, byte(n)|0x80)
		n >>= 7
	}
	return append(append(b, byte(n)), v...)
}

// request is a probe.v1.Msg with the given id, body and mode.
func request(id string, body int, mode string) []byte {
	var b []byte
	b = field(b, 0x0a, []byte(id))
	b = field(b, 0x12, make([]byte, body))
	return field(b, 0x22, []byte(mode))
}

type result struct {
	code    string
	latency time.Duration
	marked  string // the x-drill-fault trailer: the fault the server side says it injected, or ""
	message string // the status message of a call that failed
}

func percentiles(xs []time.Duration) map[string]float64 {
	if len(xs) == 0 {
		return map[string]float64{}
	}
	sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] })
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(xs)))) - 1 // nearest rank
		if i < 0 {
			i = 0
		}
		return float64(xs[i].Microseconds()) / 1000
	}
	return map[string]float64{"p50": at(0.50), "p90": at(0.90), "p99": at(0.99), "max": at(1.0)}
}

func fail(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "goload: "+format+"\n", a...)
	os.Exit(2)
}

func main() {
	addr := flag.String("addr", "", "the server, HOST:PORT")
	method := flag.String("method", "/probe.v1.Probe/Echo", "the unary method to call")
	rate := flag.Float64("rate", 100, "calls per second, sent on schedule whatever the answers")
	seconds := flag.Float64("seconds", 5, "how long to send")
	timeout := flag.Float64("timeout", 1, "each call's deadline, seconds")
	conns := flag.Int("conns", 4, "connections, calls spread round robin")
	body := flag.Int("body", 64, "request body bytes")
	mode := flag.String("mode", "", "probe.v1.Msg mode (tests/proxy/probe.proto)")
	within := flag.Float64("within", 0, "also count the OK calls answered within this many ms (0: no)")
	fault := flag.String("fault", "", "tag every call as the drill's with this directive (x-fault), e.g. abort:UNAVAILABLE")
	ratio := flag.Float64("ratio", 100, "with -fault: x-fault-ratio, percent of the drill's calls to fault")
	tenant := flag.String("tenant", "tenant-drill", "with -fault: x-tenant-id")
	flag.Parse()
	switch {
	case *addr == "":
		fail("-addr HOST:PORT is required")
	case !(*rate > 0 && *rate <= maxRate):
		fail("-rate must be in (0, %g]", maxRate)
	case !(*seconds > 0 && *seconds <= maxSeconds):
		fail("-seconds must be in (0, %g]", maxSeconds)
	case !(*timeout > 0 && *timeout <= maxTimeout):
		fail("-timeout must be in (0, %g]", maxTimeout)
	case *conns < 1 || *conns > maxConns:
		fail("-conns must be 1-%d", maxConns)
	case *body < 0 || *body > 1<<20:
		fail("-body must be 0-%d", 1<<20)
	case !(*ratio >= 0 && *ratio <= 100):
		fail("-ratio must be in [0, 100]")
	}
	clients := make([]*grpc.ClientConn, *conns)
	for i := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		// a connection of its own each: grpc-go never shares one between ClientConns
		cc, err := grpc.DialContext(ctx, *addr, grpc.WithInsecure(), grpc.WithBlock(),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(bytesCodec{})))
		cancel()
		if err != nil {
			fail("cannot connect to %s: %v", *addr, err)
		}
		defer cc.Close()
		clients[i] = cc
	}
	n := int(*rate * *seconds)
	deadline := time.Duration(*timeout * float64(time.Second))
	req := request("load", *body, *mode)
	results := make([]result, n)
	var wg sync.WaitGroup
	var maxLag time.Duration
	start := time.Now().Add(20 * time.Millisecond)
	for i := 0; i < n; i++ {
		at := start.Add(time.Duration(float64(i) / *rate * float64(time.Second)))
		if wait := time.Until(at); wait > 0 {
			time.Sleep(wait)
		} else if -wait > maxLag {
			maxLag = -wait
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			in := req
			var out []byte
			t0 := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			if *fault != "" { // the drill's keys, each call its own request id (the hit formula draws on it)
				ctx = metadata.AppendToOutgoingContext(ctx, "x-tenant-id", *tenant, "x-fault", *fault,
					"x-fault-ratio", strconv.FormatFloat(*ratio, 'g', -1, 64), "x-request-id", fmt.Sprintf("goload-%d", i))
			}
			var trailer metadata.MD
			err := clients[i%len(clients)].Invoke(ctx, *method, &in, &out, grpc.Trailer(&trailer))
			cancel()
			marked := ""
			if v := trailer.Get("x-drill-fault"); len(v) > 0 {
				marked = v[0]
			}
			results[i] = result{status.Code(err).String(), time.Since(t0), marked, status.Convert(err).Message()}
		}(i)
	}
	sent := time.Since(start)
	wg.Wait()
	elapsed := time.Since(start)
	counts := map[string]int{}
	byCode := map[string][]time.Duration{}
	okWithin := 0
	marked := map[string]int{}
	messages := map[string]string{} // per failing code, the first message seen
	for _, r := range results {
		if _, seen := messages[r.code]; !seen && r.code != "OK" {
			messages[r.code] = r.message
		}
		if r.marked != "" {
			marked[r.marked]++
		}
		counts[r.code]++
		byCode[r.code] = append(byCode[r.code], r.latency)
		if r.code == "OK" && float64(r.latency.Microseconds()) <= *within*1000 {
			okWithin++
		}
	}
	latency := map[string]map[string]float64{}
	for code, xs := range byCode {
		latency[code] = percentiles(xs)
	}
	out := map[string]interface{}{
		"rate":            *rate,
		"seconds":         *seconds,
		"timeout_s":       *timeout,
		"sent":            n,
		"send_seconds":    sent.Seconds(),
		"elapsed_seconds": elapsed.Seconds(),
		"within_ms":       *within,
		"ok_within":       okWithin,
		"max_send_lag_ms": float64(maxLag.Microseconds()) / 1000,
		"status":          counts,
		"marked":          marked,
		"messages":        messages,
		"latency_ms":      latency,
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail("%v", err)
	}
}
