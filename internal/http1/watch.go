package http1

import (
	"context"
	"sync"
	"time"
)

// A request's context is cancelled when its client leaves, so that a request still queued for
// a worker is never run and a running one is stopped. Seeing that takes a read on the socket
// while the handler runs. net/http starts one for every request; most requests end before
// anybody could leave, so a watch starts it only once the request has run for watchAfter,
// and only when the body has been read to its end (before that, the handler's own reads
// see the client leave) and nothing of a next request is buffered (a client that sends is
// still there). 100 ms is past most requests, including those that wait 50 ms on a database
// (the watch cost 12% of the daemon's CPU under 1000 such clients at 5 ms), and soon enough
// for a client that gave up on a queue.
//
// States of one request's watch:
//
//	armed ──watchAfter──▶ due ──body read, nothing buffered──▶ reading ──EOF/reset──▶ left (ctx cancelled)
//	  │                    │                                     │
//	  └──────request end───┴──────────────request end────────────┴──▶ (deadline in the past) ended
const watchAfter = 100 * time.Millisecond

type watch struct {
	c       *conn
	mu      sync.Mutex
	timer   *time.Timer
	cancel  context.CancelFunc // the request's; nil once it ended
	due     bool               // watchAfter has passed
	bodyEOF bool
	reading bool
	stopped chan struct{} // closed when the read returns
	left    bool
}

// begin arms the watch for a new request.
func (w *watch) begin(cancel context.CancelFunc, bodyEOF bool) {
	w.mu.Lock()
	w.cancel, w.due, w.bodyEOF = cancel, false, bodyEOF
	w.mu.Unlock()
	if w.timer == nil {
		w.timer = time.AfterFunc(watchAfter, w.fire)
	} else {
		w.timer.Reset(watchAfter)
	}
}

func (w *watch) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel == nil {
		return
	}
	w.due = true
	w.startLocked()
}

// bodyEnded is called when the handler read the body to its end.
func (w *watch) bodyEnded() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.bodyEOF = true
	w.startLocked()
}

func (w *watch) startLocked() {
	if !w.due || !w.bodyEOF || w.reading || w.left || w.cancel == nil {
		return
	}
	// The handler's goroutine owns the buffer; Buffered only reads its counters, and a
	// pipelined request's bytes, if any, came in before the handler began.
	if w.c.br.Buffered() > 0 {
		return
	}
	w.reading = true
	w.stopped = make(chan struct{})
	_ = w.c.rwc.SetReadDeadline(time.Time{}) // the header's deadline must not end the watch
	go w.read(w.stopped)
}

func (w *watch) read(stopped chan struct{}) {
	defer close(stopped)
	cr := &w.c.cr
	var b [1]byte
	n, err := w.c.rwc.Read(b[:])
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reading = false
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if n == 1 {
		cr.hasByte, cr.b[0] = true, b[0]
		return
	}
	if err != nil && !isTimeout(err) {
		w.left = true
		cr.err = err
		if w.cancel != nil {
			w.cancel()
		}
	}
}

// end stops the watch when the request ends, and waits for its read to return.
func (w *watch) end() {
	w.timer.Stop()
	w.mu.Lock()
	w.cancel = nil
	stopped, reading := w.stopped, w.reading
	if reading {
		_ = w.c.rwc.SetReadDeadline(aLongTimeAgo)
	}
	w.mu.Unlock()
	if reading {
		<-stopped
		_ = w.c.rwc.SetReadDeadline(time.Time{})
	}
}

// clientLeft reports whether a watch saw the client leave.
func (w *watch) clientLeft() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.left
}

var aLongTimeAgo = time.Unix(1, 0)
