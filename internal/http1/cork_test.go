package http1

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestReadFromHeadIsCorked: the head of an answer whose body goes out by the socket's ReadFrom
// (a reader that is no file: files go out by sendFile, the head with MSG_MORE) waits in the
// socket (TCP_CORK on while the body goes out), and the socket is uncorked once it is sent, so
// that the next answer is not held back.
func TestReadFromHeadIsCorked(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &corkListener{Listener: ln}
	cl.during.Store(-1)
	var after atomic.Int32
	after.Store(-1)
	serveFileOnce(t, cl, func() { after.Store(corkOf(cl.conn.Load())) }, true)
	if d := cl.during.Load(); d != 1 {
		t.Errorf("TCP_CORK while the file went out: %d, want 1", d)
	}
	if a := after.Load(); a != 0 {
		t.Errorf("TCP_CORK after the file: %d, want 0", a)
	}
}

// serveFileOnce serves one GET on ln, a 100 KiB file sent by http.ServeContent, and checks the
// answer; after (if not nil) runs in the handler once the file is sent. hide hides the file
// behind a plain io.ReadSeeker.
func serveFileOnce(t *testing.T, ln net.Listener, after func(), hide bool) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, bytes.Repeat([]byte("f"), 100<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(path)
		if err != nil {
			panic(err)
		}
		defer f.Close()
		var content io.ReadSeeker = f
		if hide {
			content = struct{ io.ReadSeeker }{f}
		}
		http.ServeContent(w, r, "f", time.Time{}, content)
		if after != nil {
			after()
		}
	})}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Close)
	got := exchange(t, ln.Addr().String(), "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
	if !strings.Contains(got, "Content-Length: 102400\r\n") || !strings.HasSuffix(got, strings.Repeat("f", 100<<10)) {
		t.Fatalf("answer: %.300s", got)
	}
}

// corkListener's connections record the socket's TCP_CORK when a file reaches their ReadFrom.
type corkListener struct {
	net.Listener
	conn   atomic.Pointer[net.TCPConn]
	during atomic.Int32
}

func (l *corkListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := c.(*net.TCPConn)
	l.conn.Store(tc)
	return corkConn{tc, &l.during}, nil
}

type corkConn struct {
	*net.TCPConn
	during *atomic.Int32
}

func (c corkConn) ReadFrom(r io.Reader) (int64, error) {
	c.during.Store(corkOf(c.TCPConn))
	return c.TCPConn.ReadFrom(r)
}

// corkOf returns the socket's TCP_CORK, -1 when it cannot be read.
func corkOf(c *net.TCPConn) int32 {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1
	}
	v := -1
	_ = raw.Control(func(fd uintptr) {
		if n, err := syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CORK); err == nil {
			v = n
		}
	})
	return int32(v)
}
