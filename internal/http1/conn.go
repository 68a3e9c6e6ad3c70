package http1

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Connection states (the lifecycle in the package doc).
const (
	stateNew int32 = iota
	stateActive
	stateIdle
	stateClosed
)

// conn is one client connection and what it reuses from request to request.
type conn struct {
	s      *Server
	rwc    net.Conn
	remote string
	ctx    context.Context
	state  atomic.Int32

	cr  connReader
	br  *bufio.Reader
	bw  *bufio.Writer
	out sockWriter // what bw writes to (sendfile.go)

	tls     *tls.ConnectionState // after the handshake, for every request's r.TLS
	head    headReader
	pending []byte // an answer's first bytes, held until its head is written
	watch   watch
}

// bufSize is the size of a connection's read and write buffers, as in net/http.
const bufSize = 4 << 10

var bufReaders, bufWriters sync.Pool

func newConn(s *Server, rwc net.Conn) *conn {
	c := &conn{s: s, rwc: rwc}
	c.cr.c = c
	c.out.conn = rwc
	if v := bufReaders.Get(); v != nil {
		c.br = v.(*bufio.Reader)
		c.br.Reset(&c.cr)
	} else {
		c.br = bufio.NewReaderSize(&c.cr, bufSize)
	}
	if v := bufWriters.Get(); v != nil {
		c.bw = v.(*bufio.Writer)
		c.bw.Reset(&c.out)
	} else {
		c.bw = bufio.NewWriterSize(&c.out, bufSize)
	}
	c.watch.c = c
	return c
}

// connReader is what the connection's bufio.Reader reads from: the socket, after the byte a
// watch may have read while the connection was busy (watch.go).
type connReader struct {
	c       *conn
	mu      sync.Mutex
	hasByte bool
	b       [1]byte
	err     error // sticky: the watch saw the client leave
}

func (r *connReader) Read(p []byte) (int, error) {
	r.mu.Lock()
	if r.hasByte {
		r.hasByte = false
		p[0] = r.b[0]
		r.mu.Unlock()
		return 1, nil
	}
	err := r.err
	r.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return r.c.rwc.Read(p)
}

// serve runs the connection's lifecycle (package doc) until it closes.
func (c *conn) serve() {
	handedOver := false
	defer func() {
		if p := recover(); p != nil {
			c.s.logger().Error("panic serving a connection", "remote", c.remote, "panic", p, "stack", string(debug.Stack()))
		}
		if !handedOver {
			_ = c.rwc.Close()
			c.release()
		}
		c.s.forget(c)
	}()
	c.remote = c.rwc.RemoteAddr().String()
	c.ctx = context.Background()
	if c.s.ConnContext != nil {
		c.ctx = c.s.ConnContext(c.ctx, c.rwc)
	}
	hdrTimeout, idleTimeout := c.s.ReadHeaderTimeout, c.s.IdleTimeout
	if idleTimeout == 0 {
		idleTimeout = hdrTimeout
	}
	if tc, ok := c.rwc.(*tls.Conn); ok {
		h2, err := c.handshake(tc, hdrTimeout)
		if err != nil {
			c.s.logger().Debug("TLS handshake failed", "remote", c.remote, "err", err)
			return
		}
		if h2 && c.s.HandOff != nil {
			handedOver = true
			c.release()
			c.s.HandOff(tc)
			return
		}
	}
	for first := true; ; first = false {
		if c.br.Buffered() == 0 {
			// Wait for the request's first byte: the whole head must come within the header
			// timeout on a new connection, and the first byte within the idle timeout on a
			// kept-alive one.
			wait := idleTimeout
			if first {
				wait = hdrTimeout
			}
			c.deadline(wait)
			if _, err := c.br.Peek(1); err != nil {
				return
			}
			if !first && hdrTimeout > 0 && !c.headBuffered() {
				_ = c.rwc.SetReadDeadline(time.Now().Add(hdrTimeout))
			}
		}
		from := stateIdle
		if first {
			from = stateNew
		}
		if !c.state.CompareAndSwap(from, stateActive) {
			return // closed by a shutdown as the byte came
		}
		if first && c.tls == nil && c.s.HandOff != nil {
			if ok, err := c.opensWithPreface(); err != nil {
				return
			} else if ok {
				handedOver = true
				c.s.HandOff(&prefaceConn{Conn: c.rwc, c: c})
				return
			}
		}
		keep := c.serveRequest()
		if !keep || c.s.closing.Load() {
			return
		}
		c.state.Store(stateIdle)
	}
}

// handshake shakes hands within d, and reports whether the client chose HTTP/2.
func (c *conn) handshake(tc *tls.Conn, d time.Duration) (h2 bool, err error) {
	if d > 0 {
		_ = tc.SetDeadline(time.Now().Add(d))
	}
	if err := tc.HandshakeContext(c.ctx); err != nil {
		return false, err
	}
	_ = tc.SetWriteDeadline(time.Time{})
	state := tc.ConnectionState()
	c.tls = &state
	return state.NegotiatedProtocol == "h2", nil
}

// deadline sets the read deadline d from now, or none for 0.
func (c *conn) deadline(d time.Duration) {
	if d > 0 {
		_ = c.rwc.SetReadDeadline(time.Now().Add(d))
	} else {
		_ = c.rwc.SetReadDeadline(time.Time{})
	}
}

// headBuffered reports whether a whole head is in the read buffer already, as it is when a
// request came in one segment: then its reading cannot stall, and needs no deadline.
func (c *conn) headBuffered() bool {
	b, _ := c.br.Peek(c.br.Buffered())
	return bytes.Contains(b, []byte("\r\n\r\n"))
}

// release gives the buffers back for other connections.
func (c *conn) release() {
	c.br.Reset(nil)
	bufReaders.Put(c.br)
	c.bw.Reset(nil)
	bufWriters.Put(c.bw)
	c.br, c.bw = nil, nil
}

// h2Preface is how an HTTP/2 client opens a connection with prior knowledge (RFC 9113 3.4);
// its first line cannot open an HTTP/1 request that this server would serve.
const h2Preface = "PRI * HTTP/2.0\r\n"

// opensWithPreface reads as much as it takes to tell whether the connection opens with
// HTTP/2's preface.
func (c *conn) opensWithPreface() (bool, error) {
	for {
		b, _ := c.br.Peek(c.br.Buffered())
		n := min(len(b), len(h2Preface))
		if string(b[:n]) != h2Preface[:n] {
			return false, nil
		}
		if n == len(h2Preface) {
			return true, nil
		}
		if _, err := c.br.Peek(len(b) + 1); err != nil {
			return false, err
		}
	}
}

// prefaceConn is a connection handed over after its first bytes were read: it replays them.
type prefaceConn struct {
	net.Conn
	c    *conn
	once sync.Once
}

func (p *prefaceConn) Read(b []byte) (int, error) {
	if p.c.br != nil && p.c.br.Buffered() > 0 {
		return p.c.br.Read(b)
	}
	p.once.Do(p.c.release)
	return p.Conn.Read(b)
}

// serveRequest reads one request, runs the handler and answers; it reports whether the
// connection may carry another request.
func (c *conn) serveRequest() (keep bool) {
	var head http.Request // copied into the request by WithContext
	body, err := c.readRequest(&head)
	if err != nil {
		var se *statusError
		if errors.As(err, &se) {
			c.refuse(se)
		}
		return false
	}
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	r := head.WithContext(ctx)
	w := &response{c: c, req: r, body: body, header: make(http.Header, 8), contentLength: -1}
	w.closeAfter = r.Close || c.s.closing.Load()
	c.watch.begin(cancel, body == nil || body.eof)
	defer c.watch.end()
	if !c.runHandler(w, r) {
		return false
	}
	if err := w.finish(); err != nil {
		return false
	}
	if body != nil && !body.drain(w) {
		c.closeWriteAndWait()
		return false
	}
	return !w.closeAfter && !c.watch.clientLeft()
}

// runHandler runs the handler, and reports false when it panicked: the connection is then
// broken off, its answer possibly half sent (http.ErrAbortHandler asks for exactly that).
func (c *conn) runHandler(w *response, r *http.Request) (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			if p != http.ErrAbortHandler {
				c.s.logger().Error("panic serving a request", "remote", c.remote, "method", r.Method, "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
			}
			ok = false
		}
		w.handlerDone = true
	}()
	c.s.Handler.ServeHTTP(w, r)
	return true
}

// refuse answers a request whose head could not be accepted, and ends the connection.
func (c *conn) refuse(se *statusError) {
	text := strconv.Itoa(se.code) + " " + http.StatusText(se.code)
	if se.msg != "" {
		text += ": " + se.msg
	}
	text += "\n"
	c.bw.Reset(&c.out)
	_, _ = c.bw.WriteString("HTTP/1.1 " + strconv.Itoa(se.code) + " " + http.StatusText(se.code) +
		"\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\nContent-Length: " +
		strconv.Itoa(len(text)) + "\r\n\r\n" + text)
	_ = c.rwc.SetWriteDeadline(time.Now().Add(time.Second))
	if c.bw.Flush() == nil {
		c.closeWriteAndWait()
	}
}

// rstAvoidanceDelay bounds the wait for a client to read an answer before the close, when it
// may still be sending: closing a socket with unread bytes resets the connection, and a reset
// can reach the client before it read the answer.
const rstAvoidanceDelay = 500 * time.Millisecond

// closeWriteAndWait ends the sending side and reads what the client still sends until it
// closes, for at most rstAvoidanceDelay.
func (c *conn) closeWriteAndWait() {
	type closeWriter interface{ CloseWrite() error }
	cw, ok := c.rwc.(closeWriter)
	if !ok {
		return
	}
	_ = cw.CloseWrite()
	_ = c.rwc.SetReadDeadline(time.Now().Add(rstAvoidanceDelay))
	_, _ = io.CopyN(io.Discard, c.rwc, 1<<20)
}

// isTimeout reports whether err is a read or write that passed its deadline.
func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }
