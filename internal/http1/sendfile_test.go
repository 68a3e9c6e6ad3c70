package http1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// sectionServer serves, on GET /?off=O&n=N&limit=L, N bytes of a file from O as an
// *io.SectionReader, with Content-Length N, under an io.LimitedReader of L when L is given
// (io.CopyN's shape). It returns the address, the file's content, path and open file.
func sectionServer(t *testing.T, size int) (addr string, content []byte, path string, f *os.File) {
	t.Helper()
	content = make([]byte, size)
	for i := range content {
		content[i] = byte(i*7 + i/251)
	}
	path = filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	addr = serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		off, _ := strconv.ParseInt(q.Get("off"), 10, 64)
		n, _ := strconv.ParseInt(q.Get("n"), 10, 64)
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		var src io.Reader = io.NewSectionReader(f, off, n)
		if l := q.Get("limit"); l != "" {
			limit, _ := strconv.ParseInt(l, 10, 64)
			src = io.LimitReader(src, limit)
		}
		_, _ = w.(io.ReaderFrom).ReadFrom(src)
	}))
	return addr, content, path, f
}

// TestFileSectionsArriveWhole: sections of every size around the socket's and a pipe's buffers,
// from the start and from inside the file, several on one keep-alive connection (the head of
// each answer waits in the kernel with MSG_MORE: none may be held back), and a section that
// the file's descriptor reads from its own offset, which the sends must not move.
func TestFileSectionsArriveWhole(t *testing.T) {
	const size = 3 << 20
	addr, content, _, f := sectionServer(t, size)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for _, tc := range []struct{ off, n int }{
		{0, 1}, {0, 100}, {5, bufSize - 1}, {0, bufSize}, {1, bufSize + 1}, {0, 64<<10 - 1},
		{3, 64 << 10}, {0, 64<<10 + 1}, {12345, 1 << 20}, {0, size}, {size - 10, 10},
	} {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprintf(c, "GET /?off=%d&n=%d HTTP/1.1\r\nHost: h\r\n\r\n", tc.off, tc.n); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("off %d, n %d: %v", tc.off, tc.n, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || !bytes.Equal(body, content[tc.off:tc.off+tc.n]) {
			t.Fatalf("off %d, n %d: %d bytes, %v: not the section", tc.off, tc.n, len(body), err)
		}
	}
	if pos, err := f.Seek(0, io.SeekCurrent); pos != 0 || err != nil {
		t.Errorf("the file's own offset moved to %d (%v)", pos, err)
	}
}

// TestFileSectionUnderALimit: io.CopyN's LimitedReader over a section bounds what is sent, and
// so does the declared length.
func TestFileSectionUnderALimit(t *testing.T) {
	addr, content, _, _ := sectionServer(t, 1<<20)
	got := exchange(t, addr, "GET /?off=10&n=300000&limit=200000 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
	_, body, ok := strings.Cut(got, "\r\n\r\n")
	// 200,000 bytes of a declared 300,000: the answer is cut short, and the connection ends.
	if !ok || body != string(content[10:10+200000]) {
		t.Errorf("%d bytes of body, want the section's first 200000", len(body))
	}
}

// TestFileThatShrankEndsTheConnection: a file shorter than the length declared for it ends the
// connection after what it had, instead of waiting for bytes that will not come.
func TestFileThatShrankEndsTheConnection(t *testing.T) {
	addr, content, path, _ := sectionServer(t, 200000)
	if err := os.Truncate(path, 150000); err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	go func() {
		done <- exchange(t, addr, "GET /?off=0&n=200000 HTTP/1.1\r\nHost: h\r\n\r\n")
	}()
	select {
	case got := <-done:
		_, body, _ := strings.Cut(got, "\r\n\r\n")
		if !strings.Contains(got, "Content-Length: 200000\r\n") || body != string(content[:150000]) {
			t.Errorf("%d bytes of body, want the 150000 the file still has", len(body))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the answer of a file that shrank never ended")
	}
}

// TestClientLeavingDuringAFileFreesTheConnection: a client that reads a little of a big file
// and leaves; the server goes on serving others.
func TestClientLeavingDuringAFileFreesTheConnection(t *testing.T) {
	addr, content, _, _ := sectionServer(t, 32<<20)
	for range 5 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Fprintf(c, "GET /?off=0&n=%d HTTP/1.1\r\nHost: h\r\n\r\n", len(content)); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
	}
	got := exchange(t, addr, "GET /?off=7&n=70000 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
	if _, body, _ := strings.Cut(got, "\r\n\r\n"); body != string(content[7:70007]) {
		t.Errorf("after clients left: %d bytes of body, want 70000", len(body))
	}
}

// countingListener counts the writes on its connections that go through net.Conn.Write: an
// answer sent by sendmsg on the socket adds none.
type countingListener struct {
	net.Listener
	writes atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, writes: &l.writes}, nil
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

// hiddenSocketListener's connections do not give their socket, as a TLS connection does not:
// large writes take writeTail's two writes.
type hiddenSocketListener struct{ net.Listener }

func (l hiddenSocketListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return struct{ net.Conn }{c}, nil
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

func (c *countingConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.New("no socket")
}

// TestLargeWritesLeaveWithTheHead: a write larger than the room left in the connection's buffer
// leaves with what is buffered (the head, an earlier short write) in one sendmsg on the socket:
// whole and in order for sizes around the buffer and the pending limit, with a head that
// nearly fills the buffer, several answers on one keep-alive connection, to a client that
// leaves the socket full for a while (the sendmsg resumes where the kernel stopped), and with
// no write through the connection for a declared answer. Chunked answers keep bufio's path.
func TestLargeWritesLeaveWithTheHead(t *testing.T) {
	t.Run("socket", func(t *testing.T) { testLargeWrites(t, true) })
	t.Run("no socket", func(t *testing.T) { testLargeWrites(t, false) })
}

func testLargeWrites(t *testing.T, socket bool) {
	const most = 16 << 20
	content := make([]byte, most)
	for i := range content {
		content[i] = byte(i*13 + i/253)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	if !socket {
		cl.Listener = hiddenSocketListener{ln}
	}
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		first, _ := strconv.Atoi(q.Get("first"))
		n, _ := strconv.Atoi(q.Get("n"))
		pad, _ := strconv.Atoi(q.Get("pad"))
		if pad > 0 {
			w.Header().Set("X-Pad", strings.Repeat("p", pad))
		}
		if q.Get("declared") != "" {
			w.Header().Set("Content-Length", strconv.Itoa(first+n))
		}
		if first > 0 {
			_, _ = w.Write(content[:first])
		}
		_, _ = w.Write(content[first : first+n])
	}), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- s.Serve(cl) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		<-done
	})

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for _, tc := range []struct {
		first, n, pad int
		declared      bool
		stall         bool // the client reads nothing for a while: the socket fills
	}{
		{0, bufSize - 200, 0, true, false},
		{0, bufSize, 0, true, false},
		{0, bufSize + 1, 0, true, false},
		{0, 20 << 10, 0, true, false},
		{0, 100, bufSize - 150, true, false},
		{0, pendingSize + 1, bufSize - 150, true, false},
		{100, bufSize, 0, true, false},
		{pendingSize, 64 << 10, 0, true, false},
		{0, most, 0, true, true},
		{0, 20 << 10, 0, false, false},
		{0, 1 << 20, 100, false, true},
	} {
		name := fmt.Sprintf("first %d, n %d, pad %d, declared %t", tc.first, tc.n, tc.pad, tc.declared)
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		before := cl.writes.Load()
		q := fmt.Sprintf("first=%d&n=%d&pad=%d", tc.first, tc.n, tc.pad)
		if tc.declared {
			q += "&declared=1"
		}
		if _, err := fmt.Fprintf(c, "GET /?%s HTTP/1.1\r\nHost: h\r\n\r\n", q); err != nil {
			t.Fatal(err)
		}
		if tc.stall {
			time.Sleep(200 * time.Millisecond)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || !bytes.Equal(body, content[:tc.first+tc.n]) {
			t.Fatalf("%s: %d bytes, %v: not what was written", name, len(body), err)
		}
		if socket && tc.declared && tc.first+tc.n+tc.pad > bufSize {
			if w := cl.writes.Load() - before; w != 0 {
				t.Errorf("%s: %d writes through the connection, want the answer in one sendmsg", name, w)
			}
		}
	}

	// Clients that leave in the middle of a sendmsg: the server goes on serving others.
	for range 3 {
		lc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Fprintf(lc, "GET /?n=%d&declared=1 HTTP/1.1\r\nHost: h\r\n\r\n", most); err != nil {
			t.Fatal(err)
		}
		_ = lc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(lc, make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
		_ = lc.Close()
	}
	got := exchange(t, ln.Addr().String(), "GET /?n=70000&declared=1 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
	if _, body, _ := strings.Cut(got, "\r\n\r\n"); body != string(content[:70000]) {
		t.Errorf("after clients left: %d bytes of body, want 70000", len(body))
	}
}

// toldConn is a TCP connection that records whether http1 told it of a failed write.
type toldConn struct {
	*net.TCPConn
	told atomic.Bool
}

func (c *toldConn) WriteFailed() { c.told.Store(true) }

// toldListener hands out its connections as *toldConn, and each on conns too.
type toldListener struct {
	net.Listener
	conns chan *toldConn
}

func (l toldListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &toldConn{TCPConn: c.(*net.TCPConn)}
	l.conns <- tc
	return tc, nil
}

// TestFailedSocketWritesAreTold: a write that http1 makes on the socket itself, past the
// connection's Write (sendmsg: a head and a large body; sendfile: a file), is told to the
// connection when it fails (WriteFailed), as its Write would have seen it fail, so that it can
// reset itself at its close; a write that went out is not.
func TestFailedSocketWritesAreTold(t *testing.T) {
	const size = 32 << 20
	file := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(file, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		if r.URL.Path == "/write" {
			_, err := w.Write(make([]byte, size))
			ended <- err
			return
		}
		f, err := os.Open(file)
		if err != nil {
			ended <- err
			return
		}
		defer f.Close()
		_, err = io.Copy(w, io.NewSectionReader(f, 0, size))
		ended <- err
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tl := toldListener{Listener: ln, conns: make(chan *toldConn, 4)}
	serveOn(t, tl, h, func(s *Server) { s.WriteTimeout = time.Second })
	for _, tc := range []struct {
		name, path string
		read       bool // the client reads the answer; otherwise nothing
	}{
		{"sendmsg, read", "/write", true},
		{"sendmsg, never read", "/write", false},
		{"sendfile, read", "/file", true},
		{"sendfile, never read", "/file", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, ln.Addr().String())
			if !tc.read {
				_ = c.(*net.TCPConn).SetReadBuffer(4 << 10) // full soon
			}
			if _, err := io.WriteString(c, "GET "+tc.path+" HTTP/1.1\r\nHost: h\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			server := <-tl.conns
			if tc.read {
				_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatal(err)
				}
				if n, err := io.Copy(io.Discard, resp.Body); n != size || err != nil {
					t.Fatalf("read %d of %d bytes: %v", n, size, err)
				}
			}
			select {
			case err := <-ended:
				if (err == nil) != tc.read {
					t.Fatalf("the handler's write ended with %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the handler's write never ended")
			}
			if told := server.told.Load(); told == tc.read {
				t.Errorf("told of a failed write: %v; want %v", told, !tc.read)
			}
		})
	}
}
