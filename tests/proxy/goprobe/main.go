// A gRPC service in Go (grpc-go from Debian's packages), for the proxy's tests: the probe.v1.Probe service of ../probe.proto,
// with no generated code (a byte codec and the five fields parsed by hand), and a record of
// what it saw of each call for Seen to report (what it did too: "answered", "failed", "wrote", "done", "end"), so a
// test counts the calls the service itself handled. grpc-go tells a caller's half-close (Recv returns io.EOF) from
// its cancel (Recv returns a Canceled error), which is what the proxy must keep apart.
//
// Usage: goprobe PORT-FILE [PORT]. Binds 127.0.0.1 on PORT (default: one the kernel picks) and writes it to
// PORT-FILE.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/golang/protobuf/ptypes/any"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Msg is probe.v1.Msg: id = 1, body = 2, count = 3, mode = 4.
type Msg struct {
	ID    string
	Body  []byte
	Count int64
	Mode  string
}

func putVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func (m *Msg) Marshal() []byte {
	var b []byte
	if m.ID != "" {
		b = putVarint(append(b, 0x0a), uint64(len(m.ID)))
		b = append(b, m.ID...)
	}
	if len(m.Body) > 0 {
		b = putVarint(append(b, 0x12), uint64(len(m.Body)))
		b = append(b, m.Body...)
	}
	if m.Count != 0 {
		b = putVarint(append(b, 0x18), uint64(m.Count))
	}
	if m.Mode != "" {
		b = putVarint(append(b, 0x22), uint64(len(m.Mode)))
		b = append(b, m.Mode...)
	}
	return b
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

func Unmarshal(b []byte) (*Msg, error) {
	m := &Msg{}
	for len(b) > 0 {
		key, n, err := varint(b)
		if err != nil {
			return nil, err
		}
		b = b[n:]
		field, wire := key>>3, key&7
		switch wire {
		case 0:
			v, n, err := varint(b)
			if err != nil {
				return nil, err
			}
			b = b[n:]
			if field == 3 {
				m.Count = int64(int32(v))
			}
		case 2:
			l, n, err := varint(b)
			if err != nil || uint64(len(b)-n) < l {
				return nil, fmt.Errorf("bad length")
			}
			v := b[n : n+int(l)]
			b = b[n+int(l):]
			switch field {
			case 1:
				m.ID = string(v)
			case 2:
				m.Body = append([]byte(nil), v...)
			case 4:
				m.Mode = string(v)
			}
		default:
			return nil, fmt.Errorf("wire type %d", wire)
		}
	}
	return m, nil
}

// bytesCodec passes messages as they are on the wire: the handlers parse Msg themselves.
type bytesCodec struct{}

func (bytesCodec) Marshal(v interface{}) ([]byte, error) { return *(v.(*[]byte)), nil }
func (bytesCodec) Unmarshal(data []byte, v interface{}) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (bytesCodec) Name() string { return "proto" }

var (
	mu   sync.Mutex
	seen = map[string][]string{}
)

func note(id, what string) {
	mu.Lock()
	seen[id] = append(seen[id], what)
	mu.Unlock()
}

func recv(s grpc.ServerStream) (*Msg, error) {
	var raw []byte
	if err := s.RecvMsg(&raw); err != nil {
		return nil, err
	}
	return Unmarshal(raw)
}

func send(s grpc.ServerStream, m *Msg) error {
	raw := m.Marshal()
	return s.SendMsg(&raw)
}

// ended names how a stream's reading ended: "end" (the caller half-closed) or the status code of the error.
func ended(err error) string {
	if err == io.EOF {
		return "end"
	}
	return status.Code(err).String()
}

func sawHeader(ctx context.Context) metadata.MD {
	md, _ := metadata.FromIncomingContext(ctx)
	saw, _ := json.Marshal(md)
	return metadata.Pairs("x-probe-saw", string(saw))
}

func echo(_ interface{}, s grpc.ServerStream) error {
	m, err := recv(s)
	if err != nil {
		return err
	}
	ctx := s.Context()
	if err := s.SendHeader(sawHeader(ctx)); err != nil {
		return err
	}
	switch m.Mode {
	case "fail": // headers first, then an error with details and a trailer
		note(m.ID, "failed")
		s.SetTrailer(metadata.Pairs("x-probe-trailer", "t-"+m.ID))
		detail := &any.Any{TypeUrl: "type.googleapis.com/probe.v1.Msg", Value: (&Msg{ID: m.ID}).Marshal()}
		st := &spb.Status{Code: int32(codes.FailedPrecondition), Message: "probe failed " + m.ID, Details: []*any.Any{detail}}
		return status.ErrorProto(st)
	case "deadline": // count = microseconds left until the deadline this call arrived with (-1: none)
		m.Count = -1
		if d, ok := ctx.Deadline(); ok {
			m.Count = int64(time.Until(d) / time.Microsecond)
		}
	case "sleep": // answer after count milliseconds, or as soon as the caller is gone (noted as "gone")
		note(m.ID, "sleeping")
		select {
		case <-time.After(time.Duration(m.Count) * time.Millisecond):
		case <-ctx.Done():
			note(m.ID, "gone")
			return ctx.Err()
		}
	case "hold": // answer only when the caller is gone: what it saw is recorded
		<-ctx.Done()
		note(m.ID, status.Code(ctx.Err()).String())
		return ctx.Err()
	}
	s.SetTrailer(metadata.Pairs("x-probe-trailer", "ok-"+m.ID))
	note(m.ID, "answered")
	return send(s, m)
}

func count(_ interface{}, s grpc.ServerStream) error {
	n, id := int64(0), ""
	for {
		m, err := recv(s)
		if err != nil {
			note(id, ended(err))
			if err != io.EOF {
				return err
			}
			return send(s, &Msg{ID: id, Count: n})
		}
		n, id = n+1, m.ID
		note(id, "message")
	}
}

func repeat(_ interface{}, s grpc.ServerStream) error {
	m, err := recv(s)
	if err != nil {
		return err
	}
	for i := int64(1); i <= m.Count; i++ {
		if err := send(s, &Msg{ID: m.ID, Body: m.Body, Count: i}); err != nil {
			note(m.ID, ended(err))
			return err
		}
		note(m.ID, "wrote")
	}
	note(m.ID, "done")
	return nil
}

func chat(_ interface{}, s grpc.ServerStream) error {
	id := ""
	for {
		m, err := recv(s)
		if err != nil {
			note(id, ended(err))
			if err != io.EOF {
				return err
			}
			// the caller half-closed: it keeps receiving until the service ends the call
			time.Sleep(100 * time.Millisecond)
			return send(s, &Msg{ID: id, Mode: "after-end", Count: 1})
		}
		id = m.ID
		note(id, "message")
		if err := send(s, m); err != nil {
			return err
		}
	}
}

func seenOf(_ interface{}, s grpc.ServerStream) error {
	m, err := recv(s)
	if err != nil {
		return err
	}
	mu.Lock()
	body, _ := json.Marshal(seen[m.ID])
	mu.Unlock()
	return send(s, &Msg{ID: m.ID, Body: body})
}

func main() {
	encoding.RegisterCodec(bytesCodec{})
	desc := grpc.ServiceDesc{
		ServiceName: "probe.v1.Probe",
		HandlerType: (*interface{})(nil),
		Streams: []grpc.StreamDesc{
			{StreamName: "Echo", Handler: echo, ServerStreams: true, ClientStreams: true},
			{StreamName: "Count", Handler: count, ServerStreams: true, ClientStreams: true},
			{StreamName: "Repeat", Handler: repeat, ServerStreams: true, ClientStreams: true},
			{StreamName: "Chat", Handler: chat, ServerStreams: true, ClientStreams: true},
			{StreamName: "Seen", Handler: seenOf, ServerStreams: true, ClientStreams: true},
		},
	}
	port := "0"
	if len(os.Args) > 2 {
		port = os.Args[2]
	}
	lis, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server := grpc.NewServer(grpc.MaxRecvMsgSize(1<<30), grpc.MaxSendMsgSize(1<<30))
	var impl interface{}
	server.RegisterService(&desc, &impl)
	tmp := os.Args[1] + ".tmp"
	if err := os.WriteFile(tmp, []byte(fmt.Sprint(lis.Addr().(*net.TCPAddr).Port)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.Rename(tmp, os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := server.Serve(lis); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
