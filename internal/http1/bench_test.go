package http1

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"
)

// BenchmarkKeepAliveHello: one client, one kept-alive connection, hello world: the front's own
// cost per request (allocations included), without PHP.
func BenchmarkKeepAliveHello(b *testing.B) {
	b.ReportAllocs()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "Hello, world!")
	})}
	go func() { _ = s.Serve(ln) }()
	b.Cleanup(s.Close)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	req := []byte("GET / HTTP/1.1\r\nHost: localhost\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
}

// BenchmarkTinyChunks: a 64 KiB body in one-byte chunks, read by its handler: the framing's
// cost per byte (issue 25 item 12).
func BenchmarkTinyChunks(b *testing.B) {
	var req []byte
	req = append(req, "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"...)
	for range 64 << 10 {
		req = append(req, "1\r\nb\r\n"...)
	}
	req = append(req, "0\r\n\r\n"...)
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	})}
	b.SetBytes(64 << 10)
	b.ResetTimer()
	for range b.N {
		wc := &wireConn{in: bytes.NewReader(req)}
		s.newConn(wc).serve()
	}
}
