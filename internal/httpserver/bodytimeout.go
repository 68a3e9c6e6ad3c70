package httpserver

import (
	"errors"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/peregrinephp/peregrine/internal/http1"
)

// On HTTP/1 connections http1 does this itself (http1.Server.BodyTimeout; ServerOptions), and
// timedBody stands aside; it bounds HTTP/2 streams' bodies.
//
// A client that declares a body and then sends nothing, or a few bytes a minute, would hold its
// connection (a slot of http.max_connections), its goroutine and its buffers for as long as it
// stays: net/http bounds the headers (ReadHeaderTimeout) but not the time between two reads of
// a body. timedBody bounds it, as nginx's client_body_timeout does: before each read of the body
// it moves the read deadline http.body_timeout ahead (HTTP/1.1: the connection's; HTTP/2: the
// stream's), and a read that times out fails with os.ErrDeadlineExceeded, which the handler
// answers with 408 (HTTP/1.1 closes the connection, HTTP/2 resets the stream once the handler
// returns, as net/http's HTTP/2 server does for an unread body).

// timedBody is a request body whose reads each have d to deliver a byte.
type timedBody struct {
	body  io.ReadCloser
	ctl   *http.ResponseController
	d     time.Duration
	armed time.Time // when the deadline was last moved
	eof   bool      // the body was read to its end
	dead  bool      // a read failed: nothing more will come (HTTP/1.1: the connection is done)
}

// withBodyTimeout returns r, when d > 0 and r has a body a shallow copy of it whose Body is a
// timedBody, and a function to run once the handler is done with the body: it bounds what
// net/http still reads of a body the handler left unread (it drains up to 256 KiB of an
// HTTP/1.1 body to keep the connection), which otherwise has no deadline at all. The request
// net/http holds keeps its own Body: net/http looks at its type to decide whether to drain it
// or close the connection (a body too large to drain, an Expect: 100-continue never answered).
func withBodyTimeout(w http.ResponseWriter, r *http.Request, d time.Duration) (*http.Request, func()) {
	if d <= 0 || r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 || http1.BodyTimed(r.Context()) {
		return r, func() {} // http1 bounds its bodies' reads itself, a deadline an eighth
	}
	tb := &timedBody{body: r.Body, ctl: http.NewResponseController(w), d: d}
	r = r.WithContext(r.Context())
	r.Body = tb
	// From now: a handler that answers before reading (a refusal) and writes more than
	// net/http buffers makes net/http drain the body before the headers go out.
	_ = tb.ctl.SetReadDeadline(time.Now().Add(d))
	return r, func() {
		switch {
		case tb.dead:
			// net/http would drain the rest for as long again: end the connection now.
			_ = tb.ctl.SetReadDeadline(time.Now())
		case !tb.eof:
			_ = tb.ctl.SetReadDeadline(time.Now().Add(d))
		}
	}
}

func (b *timedBody) Read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	// The deadline moves when an eighth of it has passed, not at every read: a body in tiny
	// frames costs no call per frame. A wait may last 9/8 of d, never less than d.
	if now := time.Now(); now.Sub(b.armed) >= b.d/8 {
		b.armed = now
		_ = b.ctl.SetReadDeadline(now.Add(b.d + b.d/8))
	}
	n, err := b.body.Read(p)
	if err != nil && err != io.EOF {
		b.dead = true
	}
	if err == io.EOF {
		b.eof = true
		// net/http now reads in the background to notice a client that leaves; a deadline
		// left set would end that read, and cancel the request as if the client had left.
		_ = b.ctl.SetReadDeadline(time.Time{})
	}
	return n, err
}

func (b *timedBody) Close() error { return b.body.Close() }

// errBodyTimeout is what a client that stalled its body is told.
var errBodyTimeout = errors.New("the request body stalled: nothing arrived within http.body_timeout")

// bodyTimedOut reports whether err comes from a body read that took longer than its deadline.
func bodyTimedOut(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }
