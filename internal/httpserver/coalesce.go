package httpserver

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// HTTP/2 multiplexes many answers on one connection, and net/http's server sends each as soon
// as it is ready, a flush of its frames, and so one TLS record and one write system call per
// answer (two for a DATA frame: its header and its payload go in records of their own), even
// when the answers of several streams are ready together. Under load those writes, and the
// loopback's TCP path under them, were most of the daemon's time on HTTP/2.
//
// coalesceConn gathers what is written in one burst into one system call. A small write is
// copied and returns at once; the first one of a burst starts a flusher goroutine, which lets
// the other ready goroutines run once (the streams whose answers are ready too, and net/http's
// frame writer) and then sends everything written meanwhile. A writer that finds coalesceNow
// bytes waiting and no send under way sends them itself: a bulk answer gains nothing from
// waiting. At most one send is under way at a time, so bytes go out in the order written.
//
// It sits under TLS (a TLS record is one Write) or, for cleartext HTTP/2, directly under
// net/http. Only connections handed to HTTP/2 coalesce (coalesceWrites): HTTP/1 already writes
// one answer, or one batch of pipelined answers, per call.

// coalesceMax is how much may wait while a send is under way: a writer beyond it waits for the
// send, so a client that reads slowly holds back its writers as it did without coalescing, and
// a connection holds at most about twice this in buffers besides connAnswerMemory.
const coalesceMax = 32 << 10

// coalesceNow is how much waiting data a writer sends itself when no send is under way.
const coalesceNow = 16 << 10

// coalesceKeep is the largest buffer a connection keeps once a burst is sent.
const coalesceKeep = 16 << 10

// closeFlushTimeout bounds how long Close and CloseWrite wait to send what is still buffered
// (HTTP/2's GOAWAY, TLS's close_notify) to a client that does not read.
const closeFlushTimeout = 5 * time.Second

type coalesceConn struct {
	net.Conn
	on           atomic.Bool   // off: writes go straight to Conn
	closeTimeout time.Duration // closeFlushTimeout; shorter in tests

	mu        sync.Mutex
	changed   sync.Cond // a send ended, or a flusher left
	buf       []byte    // written, not yet sent; not empty only while scheduled or sending
	spare     []byte    // the buffer of the last send, for the next burst
	scheduled bool      // a flusher goroutine was started and has not looked at buf yet
	sending   bool      // a send, by a flusher or a writer, is under way
	err       error     // the first failed send, or net.ErrClosed; every later Write returns it

	// The write deadlines, which the coalescer keeps while on: its callers set one before a
	// Write and clear it once their copy returns (net/http's WriteByteTimeout), so a deadline
	// on the socket would not bound the send of their bytes, which comes later.
	deadline time.Time // what callers set: for the bytes they write next
	due      time.Time // the earliest deadline of the bytes in buf; zero: none
	sendDue  time.Time // the deadline of the send under way (of the bytes it sends)
	closeDue time.Time // set by drain: everything must be out by then
}

func newCoalesceConn(c net.Conn) *coalesceConn {
	cc := &coalesceConn{Conn: c, closeTimeout: closeFlushTimeout}
	cc.changed.L = &cc.mu
	return cc
}

// coalesceListener gives each connection it accepts a coalesceConn, off, for TLS to sit on.
type coalesceListener struct{ net.Listener }

func (l coalesceListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newCoalesceConn(c), nil
}

// coalesceWrites returns c with its writes coalesced: a TLS connection accepted by a
// coalesceListener turns on the coalesceConn under it; any other connection is wrapped in one.
func coalesceWrites(c net.Conn) net.Conn {
	if tc, ok := c.(*tls.Conn); ok {
		if cc, ok := tc.NetConn().(*coalesceConn); ok {
			cc.on.Store(true)
		}
		return c
	}
	cc := newCoalesceConn(c)
	cc.on.Store(true)
	return cc
}

func (c *coalesceConn) Write(p []byte) (int, error) {
	if !c.on.Load() {
		return c.Conn.Write(p)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.err == nil && c.sending && len(c.buf) >= coalesceMax {
		if !c.deadline.IsZero() && !time.Now().Before(c.deadline) {
			return 0, fmt.Errorf("coalesced write: %w", os.ErrDeadlineExceeded)
		}
		c.waitUntil(c.deadline)
	}
	if c.err != nil {
		return 0, c.err
	}
	c.buf = append(c.buf, p...)
	c.due = earliest(c.due, c.deadline)
	switch {
	case len(c.buf) >= coalesceNow && !c.sending:
		c.send()
		if c.err != nil {
			return 0, c.err
		}
	case !c.scheduled && !c.sending:
		c.scheduled = true
		go c.flush()
	}
	return len(p), nil
}

// send sends buf. It is called with mu held and returns with it held, but releases it during
// the write; what others write meanwhile is left to a flusher.
func (c *coalesceConn) send() {
	b := c.buf
	c.buf, c.spare = c.spare[:0], nil
	c.sending = true
	c.sendDue = earliest(c.due, c.closeDue)
	_ = c.Conn.SetWriteDeadline(c.sendDue)
	c.due = time.Time{}
	c.mu.Unlock()
	_, err := c.Conn.Write(b)
	c.mu.Lock()
	c.sending = false
	if err != nil && c.err == nil {
		c.err = err
	}
	c.spare = b[:0]
	if len(c.buf) > 0 && c.err == nil && !c.scheduled {
		c.scheduled = true
		go c.flush()
	}
	c.changed.Broadcast()
}

// flush sends the burst once the other ready goroutines have run, and, when the burst is over,
// lets big buffers go so that an idle connection keeps little.
func (c *coalesceConn) flush() {
	runtime.Gosched()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scheduled = false
	if len(c.buf) > 0 && c.err == nil && !c.sending {
		c.send()
	}
	if !c.sending && len(c.buf) == 0 {
		if cap(c.buf) > coalesceKeep {
			c.buf = nil
		}
		if cap(c.spare) > coalesceKeep {
			c.spare = nil
		}
	}
	c.changed.Broadcast()
}

// drain waits until what was written is sent, for at most closeTimeout (the write deadline it
// sets fails a send to a client that does not read), and fails every later write.
func (c *coalesceConn) drain() {
	if !c.on.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.scheduled || c.sending {
		c.closeDue = time.Now().Add(c.closeTimeout)
		if c.sending {
			// The send under way keeps its bytes' own deadline if it is earlier: due now
			// holds only the bytes written since (a scheduled send computes its own).
			c.sendDue = earliest(c.sendDue, c.closeDue)
			_ = c.Conn.SetWriteDeadline(c.sendDue)
		}
		for c.scheduled || c.sending {
			c.changed.Wait()
		}
	}
	if c.err == nil {
		c.err = net.ErrClosed
	}
}

func (c *coalesceConn) Close() error {
	c.drain()
	return c.Conn.Close()
}

// CloseWrite sends what is buffered, then ends the sending side.
func (c *coalesceConn) CloseWrite() error {
	c.drain()
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// SetWriteDeadline bounds the writes that follow and, while on, the sends of their bytes.
func (c *coalesceConn) SetWriteDeadline(t time.Time) error {
	if !c.on.Load() {
		return c.Conn.SetWriteDeadline(t)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline = t
	return nil
}

func (c *coalesceConn) SetDeadline(t time.Time) error {
	if !c.on.Load() {
		return c.Conn.SetDeadline(t)
	}
	_ = c.SetWriteDeadline(t)
	return c.Conn.SetReadDeadline(t)
}

// waitUntil waits for changed, or until t when it is not zero. It is called with mu held.
func (c *coalesceConn) waitUntil(t time.Time) {
	if t.IsZero() {
		c.changed.Wait()
		return
	}
	wake := time.AfterFunc(time.Until(t), func() {
		c.mu.Lock()
		c.changed.Broadcast()
		c.mu.Unlock()
	})
	c.changed.Wait()
	wake.Stop()
}

// earliest returns the earlier of two deadlines, zero being none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
