package http1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// dial opens a connection to addr, closed with the test.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// closedWithin reports whether the server closes c within d (reading and dropping what it
// sends until then).
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	return err == nil || !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestHeadLimitsAreEnforcedAsItIsRead (issue 25 items 8, 11, 13): a request line over its
// limit is a 414, a header line over its limit or one field too many a 431, a head over its
// budget a 431, each answered as soon as the limit is passed, before the head ends.
func TestHeadLimitsAreEnforcedAsItIsRead(t *testing.T) {
	addr := serve(t, echo, func(s *Server) {
		s.MaxHeaderFields = 10
		s.MaxRequestLine = 100
		s.MaxFieldLine = 200
		s.MaxHeaderBytes = 1500
	})
	for _, tc := range []struct {
		name, head string
		want       string
	}{
		{"request line at its limit", "GET /" + strings.Repeat("a", 100-len("GET / HTTP/1.1")) + " HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", "200 OK"},
		{"request line over it", "GET /" + strings.Repeat("a", 101-len("GET / HTTP/1.1")) + " HTTP/1.1\r\n", "414 Request URI Too Long"},
		{"request line over it, no line end yet", "GET /" + strings.Repeat("a", 5000), "414 Request URI Too Long"},
		{"fields at their limit", "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n" + strings.Repeat("X:\r\n", 8) + "\r\n", "200 OK"},
		{"one field too many", "GET / HTTP/1.1\r\nHost: h\r\n" + strings.Repeat("X:\r\n", 10), "431 Request Header Fields Too Large"},
		{"field line at its limit", "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\nX: " + strings.Repeat("v", 197) + "\r\n\r\n", "200 OK"},
		{"field line over it", "GET / HTTP/1.1\r\nHost: h\r\nX: " + strings.Repeat("v", 198) + "\r\n", "431 Request Header Fields Too Large"},
		{"field line over it, no line end yet", "GET / HTTP/1.1\r\nHost: h\r\nX: " + strings.Repeat("v", 5000), "431 Request Header Fields Too Large"},
		{"head over its budget", "GET / HTTP/1.1\r\nHost: h\r\n" + strings.Repeat("X: "+strings.Repeat("v", 190)+"\r\n", 9), "431 Request Header Fields Too Large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, addr)
			// The head is never ended: an answer proves the limit is enforced while reading.
			if _, err := io.WriteString(c, tc.head); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil || !strings.Contains(line, tc.want) {
				t.Fatalf("got %q, %v; want %q", line, err, tc.want)
			}
		})
	}
}

// TestHeadOfTinyLinesCostsItsBudget (issue 25 item 11): 30 connections that each send a
// megabyte of tiny header lines are refused at the head's budget (64 KiB, 100 fields by
// default), and the server holds little memory for them meanwhile and nothing after.
func TestHeadOfTinyLinesCostsItsBudget(t *testing.T) {
	addr := serve(t, echo)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	const conns = 30
	// First 90 tiny fields each, held open before the head's end: what a connection costs.
	before := heap()
	cs := make([]net.Conn, conns)
	for i := range cs {
		cs[i] = dial(t, addr)
		if _, err := io.WriteString(cs[i], "GET / HTTP/1.1\r\nHost: h\r\n"+strings.Repeat("a:\r\n", 90)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // let the server read what was sent (no assertion on time)
	held := int64(heap()) - int64(before)
	if perConn := held / conns; perConn > 64<<10 {
		t.Errorf("a head of 90 tiny lines holds %d bytes of heap per connection", perConn)
	}
	// Then a megabyte more of them: each is refused, and the connection closed.
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = io.WriteString(c, strings.Repeat("a:\r\n", 1<<18))
		}()
	}
	for i, c := range cs {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || !strings.Contains(line, "431") {
			t.Fatalf("connection %d: %q, %v; want a 431", i, line, err)
		}
		_ = c.Close()
	}
	wg.Wait()
	after := int64(heap()) - int64(before)
	if after > 4<<20 {
		t.Errorf("the server holds %d more bytes after the refused heads", after)
	}
	t.Logf("heap: %d bytes a connection while its head is read, %d bytes in all after", held/conns, after)
}

// TestChunkOverTheBodyLimitIsRefusedAtOnce (issue 25 item 14): a chunk declaring more than the
// body limit, or taking the body past it, fails the body's read with *http.MaxBytesError
// before any of its data is read.
func TestChunkOverTheBodyLimitIsRefusedAtOnce(t *testing.T) {
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			w.WriteHeader(http.StatusRequestEntityTooLarge)
		}
		fmt.Fprintf(w, "read %d", n)
	}), func(s *Server) { s.MaxBodyBytes = 1000 })
	for _, tc := range []struct{ name, chunks, want string }{
		{"2^60", "1000000000000000\r\n", "413"},
		{"2^63-1", "7fffffffffffffff\r\n", "413"},
		{"one over", "3e9\r\n", "413"},
		{"the sum over", "1f4\r\n" + strings.Repeat("x", 500) + "\r\n1f5\r\n", "413"},
		{"at the limit", "3e8\r\n" + strings.Repeat("x", 1000) + "\r\n0\r\n\r\n", "read 1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, addr)
			// No data follows the size line: only a refusal at once can answer.
			_, _ = io.WriteString(c, "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"+tc.chunks)
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			b, err := io.ReadAll(c)
			if !strings.Contains(string(b), tc.want) && !(err != nil && strings.Contains(string(b), tc.want)) {
				t.Fatalf("got %q, %v; want %q", b, err, tc.want)
			}
		})
	}
}

// tallyConn counts the reads and read deadlines on a connection.
type tallyConn struct {
	net.Conn
	reads, deadlines *atomic.Int64
}

func (c tallyConn) Read(p []byte) (int, error) { c.reads.Add(1); return c.Conn.Read(p) }
func (c tallyConn) SetReadDeadline(t time.Time) error {
	c.deadlines.Add(1)
	return c.Conn.SetReadDeadline(t)
}

type tallyListener struct {
	net.Listener
	reads, deadlines atomic.Int64
}

func (l *tallyListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return tallyConn{c, &l.reads, &l.deadlines}, nil
}

// TestTinyChunksCostNoCallPerChunk (issue 25 item 12): a body of 64 KiB in one-byte chunks
// reaches its handler in reads of many chunks each, with neither a socket read nor a deadline
// per chunk.
func TestTinyChunksCostNoCallPerChunk(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &tallyListener{Listener: ln}
	var handlerReads atomic.Int64
	s := &Server{ReadHeaderTimeout: 5 * time.Second, BodyTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 32<<10)
		total := 0
		for {
			n, err := r.Body.Read(buf)
			total += n
			if n > 0 {
				handlerReads.Add(1)
			}
			if err != nil {
				fmt.Fprintf(w, "body=%d err=%v", total, err)
				return
			}
		}
	})}
	go func() { _ = s.Serve(cl) }()
	t.Cleanup(s.Close)

	const size = 64 << 10
	var req bytes.Buffer
	req.WriteString("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
	for range size {
		req.WriteString("1\r\nb\r\n")
	}
	req.WriteString("0\r\n\r\n")
	got := exchange(t, ln.Addr().String(), req.String())
	if !strings.Contains(got, fmt.Sprintf("body=%d err=EOF", size)) {
		t.Fatalf("answer: %.300s", got)
	}
	// 384 KiB of framing come in reads of up to 4 KiB: about a hundred, never one a chunk.
	if n := handlerReads.Load(); n > size/100 {
		t.Errorf("the handler needed %d reads for %d chunks", n, size)
	}
	if n := cl.reads.Load(); n > size/100 {
		t.Errorf("%d socket reads for %d chunks", n, size)
	}
	if n := cl.deadlines.Load(); n > 20 {
		t.Errorf("%d read deadlines set for %d chunks", n, size)
	}
}

// TestUnreadBodyAndKeepAlive (issue 25 item 8): an answer given without reading the body says
// Connection: close, and closes, when more than 256 KiB would have to be read to reach the
// next request (or a chunked body could not be read); with less, the body is read and
// dropped before the answer, and a pipelined request is answered.
func TestUnreadBodyAndKeepAlive(t *testing.T) {
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refuse" {
			http.Error(w, "no", http.StatusRequestEntityTooLarge) // the body is never read
			return
		}
		_, _ = io.WriteString(w, "next answered")
	}))
	for _, tc := range []struct {
		name, body, head string
		keep             bool
	}{
		{"small body", strings.Repeat("x", 1000), "Content-Length: 1000", true},
		{"256 KiB", strings.Repeat("x", maxDrain), fmt.Sprintf("Content-Length: %d", maxDrain), true},
		{"256 KiB and a byte", strings.Repeat("x", maxDrain+1), fmt.Sprintf("Content-Length: %d", maxDrain+1), false},
		{"300 KiB", strings.Repeat("x", 300<<10), fmt.Sprintf("Content-Length: %d", 300<<10), false},
		{"small chunked", "5\r\nhello\r\n0\r\n\r\n", "Transfer-Encoding: chunked", true},
		{"large chunked", fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", 300<<10, strings.Repeat("x", 300<<10)), "Transfer-Encoding: chunked", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, addr)
			go func() {
				_, _ = io.WriteString(c, "POST /refuse HTTP/1.1\r\nHost: h\r\n"+tc.head+"\r\n\r\n"+tc.body+"GET /next HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
			}()
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != 413 || resp.Close == tc.keep {
				t.Fatalf("refusal: %d, Connection: close %v; want keep-alive %v", resp.StatusCode, resp.Close, tc.keep)
			}
			rest, _ := io.ReadAll(br)
			if tc.keep != strings.Contains(string(rest), "next answered") {
				t.Fatalf("after the refusal (keep-alive %v): %.200q", tc.keep, rest)
			}
		})
	}
}

// TestEveryPhaseHasADeadline (issue 25 item 10): a connection that stops sending in any phase
// is closed by one of the timeouts: within the head, within the body, after a body with the
// next request's first byte, after a head split behind a slow request, while idle.
func TestEveryPhaseHasADeadline(t *testing.T) {
	// serveTimeouts serves with every timeout d; /slow takes longer than the header timeout.
	serveTimeouts := func(d time.Duration) string {
		return serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				time.Sleep(3 * d)
			}
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(w, "ok "+r.URL.Path)
		}), func(s *Server) { s.ReadHeaderTimeout, s.IdleTimeout, s.BodyTimeout = d, d, d })
	}
	const d = 200 * time.Millisecond
	addr := serveTimeouts(d)
	for _, tc := range []struct{ name, sent string }{
		{"in the head", "GET / HTTP/1.1\r\nHost: h\r\n"},
		{"in the body", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nab"},
		{"a body and the next request's first byte", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nabG"},
		{"a chunked body and the next request's first byte", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\nG"},
		{"idle", "GET / HTTP/1.1\r\nHost: h\r\n\r\n"},
		{"a split head behind a slow request", "GET /slow HTTP/1.1\r\nHost: h\r\n\r\nGET /next HTTP/1.1\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, addr)
			_, _ = io.WriteString(c, tc.sent)
			if !closedWithin(c, 20*d) {
				t.Fatal("the connection is still open")
			}
		})
	}
	// The split head is answered when its rest comes after the slow answer, later than the
	// header timeout counted from the first request. Its rest must still come within the header
	// timeout counted from the answer, so this part has a server of its own whose timeouts
	// are a second: a loaded machine (race build) may take more than 200ms to read the answer
	// and write the rest.
	const long = time.Second
	c := dial(t, serveTimeouts(long))
	_, _ = io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: h\r\n\r\nGET /next HTTP/1.1\r\n")
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(20 * long))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_, _ = io.WriteString(c, "Host: h\r\nConnection: close\r\n\r\n")
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), "ok /next") {
		t.Fatalf("the split head behind a slow request: %q", rest)
	}
}

// TestManyStalledPipelinesAreClosed (issue 25 item 10): 150 connections that each send a body
// and the first byte of the next request are all closed by the timeouts.
func TestManyStalledPipelinesAreClosed(t *testing.T) {
	const d = 200 * time.Millisecond
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	}), func(s *Server) { s.ReadHeaderTimeout, s.IdleTimeout, s.BodyTimeout = d, d, d })
	const n = 150
	var open atomic.Int64
	var wg sync.WaitGroup
	for range n {
		c := dial(t, addr)
		_, _ = io.WriteString(c, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhelloP")
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !closedWithin(c, 30*time.Second) {
				open.Add(1)
			}
		}()
	}
	wg.Wait()
	if open.Load() > 0 {
		t.Fatalf("%d of %d connections still open", open.Load(), n)
	}
}

// TestWritesHaveADeadline (issue 25 item 9): an answer to a client that reads nothing ends at
// the write timeout, whether it goes out by sendfile (static files, X-Sendfile), by the
// socket's ReadFrom or by writes.
func TestWritesHaveADeadline(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "big")
	if err != nil {
		t.Fatal(err)
	}
	const size = 32 << 20 // more than the socket buffers hold
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	done := make(chan error, 3)
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(size))
		var err error
		switch r.URL.Path {
		case "/sendfile":
			_, err = io.Copy(w, io.NewSectionReader(f, 0, size))
		case "/readfrom":
			_, err = w.(io.ReaderFrom).ReadFrom(io.LimitReader(struct{ io.Reader }{io.NewSectionReader(f, 0, size)}, size))
		default:
			buf := make([]byte, 64<<10)
			for sent := 0; sent < size && err == nil; sent += len(buf) {
				_, err = w.Write(buf)
			}
		}
		done <- err
	}), func(s *Server) { s.WriteTimeout = 300 * time.Millisecond })
	for _, path := range []string{"/sendfile", "/readfrom", "/write"} {
		t.Run(path, func(t *testing.T) {
			c := dial(t, addr)
			_, _ = io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: h\r\n\r\n")
			select {
			case err := <-done:
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("the answer ended with %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the answer to a client that reads nothing is still being written")
			}
			if !closedWithin(c, 10*time.Second) {
				t.Fatal("the connection is still open")
			}
		})
	}
}

// TestHandlerThatWritesNothingIs200: as under net/http, a handler that neither writes nor
// sets a status answers 200 with an empty body (it went out as "HTTP/1.1 0").
func TestHandlerThatWritesNothingIs200(t *testing.T) {
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen", "1")
	}))
	checkExchange(t, exchange(t, addr, "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"),
		[]string{"HTTP/1.1 200 OK\r\n", "X-Seen: 1\r\n", "Content-Length: 0\r\n"}, nil)
}
