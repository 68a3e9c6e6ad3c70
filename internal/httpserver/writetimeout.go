package httpserver

import (
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"
)

// On HTTP/1 connections http1 bounds each write itself (http1.Server.WriteTimeout); the
// HTTP/2 streams net/http serves on the connections http1 hands it are bounded here, as
// nginx's send_timeout bounds a write: a client that takes nothing for http.write_timeout
// loses its stream (HTTP/2's flow control holds a write that the client grants no window
// for: its socket is read all along) or its connection (a socket that nobody reads:
// HTTP2Config.WriteByteTimeout, set by Listen).
//
// http.Server.WriteTimeout is not the tool: on HTTP/2 it bounds a stream from its first
// frame, so a script that works longer than it before answering would lose its answer.

// withWriteTimeout returns h, when d > 0 wrapped so that each write of an answer, its flushes
// and 1xx answers have d to go out, and the time between writes has none.
func withWriteTimeout(h http.Handler, d time.Duration) http.Handler {
	if d <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&timedWriter{ResponseWriter: w, ctl: http.NewResponseController(w), d: d}, r)
	})
}

// timedWriter is an HTTP/2 stream's ResponseWriter whose writes each have d. The deadline is
// set before a write and cleared after it: on HTTP/2 it is a timer that resets the stream when
// it fires, write or no write.
type timedWriter struct {
	http.ResponseWriter
	ctl *http.ResponseController
	d   time.Duration
}

func (w *timedWriter) bounded(write func() error) error {
	_ = w.ctl.SetWriteDeadline(time.Now().Add(w.d))
	err := write()
	_ = w.ctl.SetWriteDeadline(time.Time{})
	return err
}

func (w *timedWriter) Write(p []byte) (n int, err error) {
	err = w.bounded(func() error {
		n, err = w.ResponseWriter.Write(p)
		return err
	})
	return n, err
}

// WriteHeader is bounded too: a 1xx answer goes out at once.
func (w *timedWriter) WriteHeader(code int) {
	_ = w.bounded(func() error { w.ResponseWriter.WriteHeader(code); return nil })
}

func (w *timedWriter) Flush() { _ = w.FlushError() }

// FlushError is Flush for http.ResponseController, with the error.
func (w *timedWriter) FlushError() error {
	return w.bounded(func() error { return http.NewResponseController(w.ResponseWriter).Flush() })
}

// Unwrap lets http.ResponseController reach the stream's own writer (deadlines, full duplex).
func (w *timedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// A connection closed after one of its writes failed (a write timeout: a client that does not
// read) is reset rather than closed with FIN: a FIN would leave what the kernel still holds for
// the client (megabytes) to a socket that no descriptor owns any more, which the kernel keeps
// sending at the pace the client reads, for minutes past the timeout that ended it, and which
// the client sees as a connection that never ends (nginx's reset_timedout_connection).
type resetListener struct{ net.Listener }

func (l resetListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &resetConn{Conn: c}, nil
}

// resetConn is an accepted connection that remembers whether a write on it failed: through
// it, or on its socket by http1 (sendmsg, sendfile), which tells it (WriteFailed). It passes
// on what http1 looks for on the socket (sendfile, TCP_CORK, half close).
type resetConn struct {
	net.Conn
	failed atomic.Bool
}

func (c *resetConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil {
		c.failed.Store(true)
	}
	return n, err
}

// WriteFailed is how http1 says that a write it made on the socket itself failed.
func (c *resetConn) WriteFailed() { c.failed.Store(true) }

func (c *resetConn) ReadFrom(r io.Reader) (int64, error) {
	var n int64
	var err error
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(r)
	} else {
		n, err = io.Copy(struct{ io.Writer }{c.Conn}, r)
	}
	if err != nil {
		c.failed.Store(true) // a failed read of r too: then the answer is cut anyway
	}
	return n, err
}

func (c *resetConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errNoSocket
}

func (c *resetConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close resets the connection when a write failed: SO_LINGER 0 makes close send RST and drop
// what is unsent.
func (c *resetConn) Close() error {
	if c.failed.Load() {
		if raw, err := c.SyscallConn(); err == nil {
			_ = raw.Control(func(fd uintptr) {
				_ = syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 0})
			})
		}
	}
	return c.Conn.Close()
}

// What http1 looks for on the socket.
var (
	_ io.ReaderFrom                   = (*resetConn)(nil)
	_ syscall.Conn                    = (*resetConn)(nil)
	_ interface{ CloseWrite() error } = (*resetConn)(nil)
	_ interface{ WriteFailed() }      = (*resetConn)(nil)
)
