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

	tls        *tls.ConnectionState // after the handshake, for every request's r.TLS
	head       headReader
	pending    []byte // an answer's first bytes, held until its head is written
	watch      watch
	lastMethod string    // of the request before: after a POST, a stray CRLF is skipped
	writeArmed time.Time // when the write deadline was last moved; zero: not set

	hijacked bool // the handler took the connection over (hijack.go)

	// contMu orders a body's 100 Continue, written by whichever goroutine reads the body
	// first, with the answer's writes to bw (1xx answers, the head) on the handler's: each
	// is written whole, and no 100 after the head (body.sendContinue).
	contMu sync.Mutex
}

// bufSize is the size of a connection's read and write buffers, as in net/http.
const bufSize = 4 << 10

var bufReaders, bufWriters sync.Pool

func newConn(s *Server, rwc net.Conn) *conn {
	c := &conn{s: s, rwc: rwc}
	c.cr.c = c
	c.out.conn, c.out.c = rwc, c
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

	// While a body is read (set and read on the connection's goroutine only): each read
	// from the socket has slide to deliver, the deadline moved when armed is that old.
	slide time.Duration
	armed time.Time
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
	if r.slide > 0 {
		if now := time.Now(); now.Sub(r.armed) >= r.slide/8 {
			r.armed = now
			_ = r.c.rwc.SetReadDeadline(now.Add(r.slide + r.slide/8))
		}
	}
	return r.c.rwc.Read(p)
}

type bodyTimedKey struct{}

// BodyTimed reports whether the request whose context is ctx has its body reads bounded by
// its Server's BodyTimeout, so that its handler need not bound them itself.
func BodyTimed(ctx context.Context) bool {
	v, _ := ctx.Value(bodyTimedKey{}).(bool)
	return v
}

// bodyDeadlines starts (d > 0) or ends the moving read deadline of a body.
func (r *connReader) bodyDeadlines(d time.Duration) {
	r.slide, r.armed = d, time.Time{}
}

// armWrite moves the write deadline WriteTimeout ahead before a write to the socket, when it
// was last moved an eighth of it ago (or never).
func (c *conn) armWrite() {
	d := c.s.WriteTimeout
	if d <= 0 {
		return
	}
	if now := time.Now(); now.Sub(c.writeArmed) >= d/8 {
		c.writeArmed = now
		_ = c.rwc.SetWriteDeadline(now.Add(d + d/8))
	}
}

// serve runs the connection's lifecycle (package doc) until it closes.
func (c *conn) serve() {
	handedOver := false
	defer func() {
		if p := recover(); p != nil {
			c.s.logger().Error("panic serving a connection", "remote", c.remote, "panic", p, "stack", string(debug.Stack()))
		}
		if !handedOver && !c.hijacked {
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
	if c.s.BodyTimeout > 0 {
		c.ctx = context.WithValue(c.ctx, bodyTimedKey{}, true)
	}
	hdrTimeout, idleTimeout := c.s.ReadHeaderTimeout, c.s.IdleTimeout
	if idleTimeout == 0 {
		idleTimeout = hdrTimeout
	}
	// The first head must come within the header timeout from the accept, a TLS handshake
	// included: one budget, so that a slow handshake does not buy a slow head a second one.
	var firstHeadBy time.Time // zero: none
	if hdrTimeout > 0 {
		firstHeadBy = time.Now().Add(hdrTimeout)
	}
	if tc, ok := c.rwc.(*tls.Conn); ok {
		h2, err := c.handshake(tc, firstHeadBy)
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
		if first {
			_ = c.rwc.SetReadDeadline(firstHeadBy)
			if c.br.Buffered() == 0 {
				if _, err := c.br.Peek(1); err != nil {
					return
				}
			}
		} else {
			// As net/http: the next request's first 4 bytes within the idle timeout (a
			// connection that sends fewer and leaves is closed without an answer), and then
			// its whole head within the header timeout, whatever was buffered before.
			if c.br.Buffered() < 4 {
				c.deadline(idleTimeout)
				if _, err := c.br.Peek(4); err != nil {
					return
				}
			}
			if c.lastMethod == http.MethodPost {
				b, _ := c.br.Peek(4) // RFC 9112 2.2: a stray CRLF after a POST body
				_, _ = c.br.Discard(len(b) - len(bytes.TrimLeft(b, "\r\n")))
			}
			if !c.headBuffered() {
				c.deadline(hdrTimeout)
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

// handshake shakes hands by the deadline (zero: none), and reports whether the client chose
// HTTP/2.
func (c *conn) handshake(tc *tls.Conn, deadline time.Time) (h2 bool, err error) {
	_ = tc.SetDeadline(deadline)
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
	c.lastMethod = head.Method
	if body != nil {
		c.cr.bodyDeadlines(c.s.BodyTimeout)
		defer c.cr.bodyDeadlines(0)
	}
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	r := head.WithContext(ctx)
	w := &response{c: c, req: r, body: body, header: make(http.Header, 8), contentLength: -1}
	w.closeAfter = r.Close || c.s.closing.Load()
	c.watch.begin(cancel, body == nil || body.eof.Load())
	defer c.watch.end()
	if !c.runHandler(w, r) || c.hijacked {
		return false
	}
	if err := w.finish(); err != nil {
		return false
	}
	if body != nil && !body.drain() {
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
	h := c.s.Handler
	if r.RequestURI == "*" {
		h = asteriskOptions{} // the server's own, as net/http answers it: no script runs for it
	}
	h.ServeHTTP(w, r)
	return true
}

// asteriskOptions answers OPTIONS * (the only method parseRequestLine lets have the target
// *), which asks about the server, not a resource: 200, no body.
type asteriskOptions struct{}

func (asteriskOptions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Length", "0")
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
	c.writeArmed = time.Now() // the second above is this write's deadline
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
