package worker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peregrinephp/peregrine/internal/protocol"
)

// Exchange is the conversation with one worker process (docs/protocol.md, "The exchange"): the
// one engine that runs requests on it, whatever the worker's concurrency, by the life the
// package doc draws. It has one in-flight table (the requests written and not yet ended, by
// id), one writer (a request takes its id when its write begins, under the writer's lock, so
// REQUEST frames reach PHP in id order, each whole) and one reader step (step, take), which
// checks each frame against the conversation, hands it to its request and ends requests on DONE
// by the rules of rules.go; end ends what is left when the worker dies.
//
// At concurrency 1 the goroutine that runs the requests runs the reader too (Exec, Finish): a
// request that finds its worker free crosses no goroutine, and several requests may go in one
// write (a batch), which the worker runs one after the other. Above 1 a reader goroutine runs
// the same step and queues each frame for its request's goroutine (Do): a slow client holds up
// only its own request, never the worker. Run is either, for the pool.
type Exchange struct {
	w     *Worker
	conc  int
	grace time.Duration    // above 1: how long a cancelled request may take to end
	onEnd func(fate error) // above 1: called once per Do, when its request has ended

	wmu sync.Mutex // the writer: one at a time, so frames never interleave on the pipe

	lastFrame atomic.Int64 // above 1: when the reader last read a frame, in Unix nanoseconds

	mu       sync.Mutex
	calls    map[uint32]*flight // the in-flight table
	closed   bool               // the worker died or said it exits: nothing more is written
	fate     error              // why it closed
	said     bool               // its last word came: lastRead is what it said
	lastRead uint32
	dead     chan struct{} // closed when the worker is done: died, or said LAST and ended its last request

	run run // concurrency 1: the batch being run, between Exec and Finish
}

// flight is one request in the table; its fields are guarded by Exchange.mu.
type flight struct {
	call        *Call
	id          uint32
	index       int   // in its batch (concurrency 1)
	gotResponse bool  // its RESPONSE came: BODY frames may follow, HINTS not
	answered    bool  // its answer's last frame came
	cancelled   bool  // CANCEL was sent (above 1): what else comes for it is dropped
	stopped     error // why the server stopped it: exec_timeout, its client left or reads too slowly
	fatal       bool  // DONE with LAST came before its answer: it ended the process
	unread      bool  // the rules say the worker never read it: it may run elsewhere
	ended       bool

	// Above 1 only: the frames waiting for its goroutine, and what wakes it.
	queue  []queuedFrame
	queued int
	timer  *time.Timer
	notify chan struct{} // cap 1: the queue grew, or the request ended or was stopped
}

type queuedFrame struct {
	typ     protocol.Type
	flags   uint16
	payload []byte
}

// maxQueued bounds the answer bytes waiting for one request's goroutine (its client reads too
// slowly): past it the request is cancelled rather than the worker's memory held.
const maxQueued = 16 << 20

// NewExchange returns the exchange of w at the given concurrency (workers.concurrency; below 2
// means 1). Above 1 a reader goroutine starts, requests run with Do, grace bounds how long a
// cancelled request may take to end before the worker is killed. onEnd, if not nil, is called once per
// call when its request has ended (or was never written), with the worker's fate: nil while it
// serves on, ErrExiting once it said it exits, or why it died. At 1, requests run with Exec and
// Finish, and grace is not used. Run runs requests at any concurrency. Cancelling ctx kills the
// worker.
func NewExchange(ctx context.Context, w *Worker, concurrency int, grace time.Duration, onEnd func(fate error)) *Exchange {
	x := &Exchange{w: w, conc: max(concurrency, 1), grace: grace, onEnd: onEnd, calls: map[uint32]*flight{}, dead: make(chan struct{})}
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, w.Kill)
		go func() {
			<-w.exited
			stop()
		}()
	}
	if x.conc > 1 {
		go x.read()
	}
	return x
}

// Dead is closed once the worker can run nothing more: it died, broke the protocol, or said it
// exits and ended its last request.
func (x *Exchange) Dead() <-chan struct{} { return x.dead }

// LastFrame is when a concurrent worker last sent a frame (zero before its first): a worker
// with requests in flight that sends nothing for long is most likely blocked by one of them (a
// CPU loop holds every fiber of its process), which the pool weighs when it picks a worker.
func (x *Exchange) LastFrame() time.Time {
	if ns := x.lastFrame.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// registerLocked puts c in the table under the next id, for the writer (under wmu, or at
// concurrency 1 from the one goroutine that runs the worker). It takes the request's hold on c's bytes, which
// ends with the request (release).
func (x *Exchange) registerLocked(f *flight, c *Call) {
	c.Hold()
	f.call = c
	f.id = x.w.assign(c)
	x.calls[f.id] = f
}

// assign gives c the next request id, in its frame. Ids are given in the order frames are
// written, by the one writer of the moment (Exec's caller, which has the worker to itself, or
// Exchange.write under its lock), so that a worker's last word ("the last request I read") splits
// the requests written to it exactly (rules.go).
func (w *Worker) assign(c *Call) uint32 {
	w.nextID++
	binary.LittleEndian.PutUint32(c.Frame[4:8], w.nextID)
	return w.nextID
}

// writeCall writes c's REQUEST frame from byte wrote on, then its body, waiting for PHP to read
// them (up to the write deadline): how every request reaches PHP at every concurrency, but what
// Exec's first write takes at once.
func (w *Worker) writeCall(c *Call, wrote int) error {
	if wrote < len(c.Frame) {
		if _, err := w.toPHP.Write(c.Frame[wrote:]); err != nil {
			return err
		}
	}
	if body, ok := c.body(); ok {
		if _, err := io.Copy(w.toPHP, body); err != nil {
			return err
		}
	}
	return nil
}

// Run runs calls on the worker and returns once call lead's outcome is known (a negative lead:
// once every call has its outcome). Above concurrency 1 calls holds one call, lead is 0, and
// cancelling ctx stops its request (Do). At 1 the calls are a batch run by Exec, and what
// follows lead's answer (its DONE, the rest of the batch) is seen through by another goroutine
// (Finish); ctx is not watched: stopping a request would kill the worker, and with it the rest of
// the batch, so a request whose client left runs to its end, and a client gone while its answer
// streams is an Answer that fails with ErrAbandoned. settled(i), if not nil, is called from any
// goroutine once call i's outcome is known, and onEnd (NewExchange) once per call when its
// request has ended or was never written.
func (x *Exchange) Run(ctx context.Context, calls []*Call, timeout time.Duration, lead int, settled func(i int)) {
	if x.conc > 1 {
		x.Do(ctx, calls[0], timeout)
		if settled != nil {
			settled(0)
		}
		return
	}
	if done, _ := x.Exec(context.Background(), calls, timeout, lead, settled); !done {
		go func() { _ = x.Finish(settled) }()
	}
}

// step is the reader's one step, the same at every concurrency: it reads a frame and takes it.
// It reports false once the worker is gone, or broke the protocol and was killed: end has ended
// what was in flight.
func (x *Exchange) step(ctx context.Context) bool {
	h, payload, err := x.w.readFrame()
	if err != nil {
		x.end(x.w.fail(ctx, err))
		return false
	}
	if x.conc > 1 {
		x.lastFrame.Store(time.Now().UnixNano())
	}
	if err := x.take(h, payload); err != nil {
		x.w.Kill()
		<-x.w.exited
		x.end(err)
		return false
	}
	return true
}

// take handles one frame from the worker, for step: it checks the frame against
// the conversation (docs/protocol.md), hands an answer's frame to its request, and ends requests
// on DONE by the rules. An error is a protocol violation: the reader kills the worker.
func (x *Exchange) take(h protocol.Header, payload []byte) error {
	switch h.Type {
	case protocol.TypeError:
		return fmt.Errorf("%w: the worker reported: %s", ErrProtocol, payload)
	case protocol.TypeHints, protocol.TypeResponse, protocol.TypeBody, protocol.TypeDone:
	default:
		return fmt.Errorf("%w: a %s frame from the worker", ErrProtocol, h.Type)
	}
	last := h.Type == protocol.TypeDone && h.Flags&protocol.FlagLast != 0
	x.mu.Lock()
	f := x.calls[h.ID]
	if f != nil && x.conc == 1 && f != x.run.head() {
		// One at a time: a request's frames come only once the one before it has ended.
		x.mu.Unlock()
		return fmt.Errorf("%w: a %s frame for request %d, want one for %d", ErrProtocol, h.Type, h.ID, x.run.head().id)
	}
	var ended []*flight
	if last {
		word, err := lastRead(h, payload, x.conc == 1)
		if err != nil {
			x.mu.Unlock()
			return err
		}
		x.said, x.lastRead, x.closed = true, word, true
		for _, g := range x.calls { // written after the last request read: never read
			if g != f && !g.answered && outcome(g.id, false, word) == Unread {
				g.unread = true
				ended = append(ended, g)
			}
		}
		sortByID(ended)
		for _, g := range ended {
			x.endLocked(g)
		}
	}
	defer func() {
		for _, g := range ended {
			x.ended(g)
		}
	}()
	switch {
	case f == nil && last:
		// The worker's last word for a request that has ended, or for none: it exits between
		// requests; what runs on it ends when it is gone, nothing new is written to it.
		if x.fate == nil {
			x.fate = fmt.Errorf("%w after request %d", ErrExiting, h.ID)
		}
		x.mu.Unlock()
		return nil
	case f == nil:
		x.mu.Unlock()
		return fmt.Errorf("%w: a %s frame for request %d, which is not running", ErrProtocol, h.Type, h.ID)
	case h.Type == protocol.TypeDone:
		unanswered := !f.answered && !f.cancelled
		switch {
		case unanswered && !last:
			x.mu.Unlock()
			return fmt.Errorf("%w: DONE for request %d before its answer", ErrProtocol, h.ID)
		case h.Length != 0 && !last:
			x.mu.Unlock()
			return fmt.Errorf("%w: a DONE with a payload for request %d", ErrProtocol, h.ID)
		case last && unanswered: // the worker names the request a fatal error stopped
			f.fatal = true
			if x.fate == nil || errors.Is(x.fate, ErrExiting) {
				x.fate = fmt.Errorf("%w: request %d hit a fatal error", ErrExiting, h.ID)
			}
		case last && x.fate == nil:
			x.fate = fmt.Errorf("%w after request %d", ErrExiting, h.ID)
		}
		x.endLocked(f)
		ended = append(ended, f)
		x.mu.Unlock()
		return nil
	case f.answered:
		x.mu.Unlock()
		return fmt.Errorf("%w: a %s frame for request %d after its answer", ErrProtocol, h.Type, h.ID)
	case f.cancelled:
		x.mu.Unlock()
		return nil // dropped: its caller is gone
	case h.Type == protocol.TypeHints && f.gotResponse, h.Type == protocol.TypeResponse && f.gotResponse,
		h.Type == protocol.TypeBody && !f.gotResponse:
		x.mu.Unlock()
		return fmt.Errorf("%w: a %s frame out of place for request %d", ErrProtocol, h.Type, h.ID)
	}
	if h.Type != protocol.TypeHints {
		f.gotResponse = true
		f.answered = h.Flags&protocol.FlagMore == 0
	}
	if x.conc == 1 {
		// The reader is the request's own goroutine: the frame goes to its Answer now, outside
		// the lock (a streamed answer may wait for its client).
		x.mu.Unlock()
		err := f.call.Answer.Frame(h.Type, h.Flags, payload)
		Poison(payload[:len(payload):len(payload)]) // valid only during the call
		switch {
		case errors.Is(err, ErrAbandoned):
			x.stop(f, err)
		case err != nil:
			return fmt.Errorf("%w: %s frame for request %d: %v", ErrProtocol, h.Type, h.ID, err)
		case f.answered:
			f.call.Outcome = Answered
			if x.run.settled != nil {
				x.run.settled(f.index)
			}
		}
		return nil
	}
	f.queued += len(payload)
	over := f.queued > maxQueued
	if !over {
		f.queue = append(f.queue, queuedFrame{h.Type, h.Flags, append([]byte(nil), payload...)})
		signal(f.notify)
	}
	x.mu.Unlock()
	if over {
		x.w.log.Warn("cancelling a request whose client reads too slowly", "request", f.id, "queued", f.queued)
		x.stop(f, fmt.Errorf("%w: its client read too slowly (%d bytes of its answer waiting)", ErrCancelled, f.queued))
	}
	return nil
}

// endLocked ends f: it leaves the table, and its goroutine, if still waiting, sees it.
func (x *Exchange) endLocked(f *flight) {
	f.ended = true
	if f.timer != nil {
		f.timer.Stop()
	}
	delete(x.calls, f.id)
	if f.notify != nil {
		signal(f.notify)
	}
}

// ended reports a request that ended (endLocked), outside the lock. Above concurrency 1 it is
// released at once; at 1 the reader, which is the requests' own goroutine, sets its outcome,
// and the batch's end releases it, once the writer is done (endRun).
func (x *Exchange) ended(f *flight) {
	if x.conc > 1 {
		x.release(f.call, x.fateOr(nil))
		return
	}
	answered := f.call.Outcome == Answered // and reported as such (take)
	x.settle(f, x.fateOr(nil))
	if !answered && x.run.settled != nil {
		x.run.settled(f.index)
	}
}

// release ends the request's hold on its bytes and gives its capacity back (onEnd).
func (x *Exchange) release(c *Call, fate error) {
	c.Drop()
	if x.onEnd != nil {
		x.onEnd(fate)
	}
}

// end ends every request still in the table by the rules, once the worker is gone (or, at
// concurrency 1, has said its last word: it sends nothing after it), with the worker's fate.
func (x *Exchange) end(fate error) {
	x.mu.Lock()
	x.closed = true
	if x.fate == nil { // a fate said before (LAST, a violation) is the truer one
		x.fate = fate
	}
	last := uint32(allRead)
	switch {
	case x.said:
		last = x.lastRead
	case x.conc == 1 && x.run.head() != nil:
		last = x.run.head().id // the worker reads the next only after its DONE
	}
	ended := make([]*flight, 0, len(x.calls))
	for _, f := range x.calls {
		f.unread = !f.answered && outcome(f.id, false, last) == Unread
		ended = append(ended, f)
	}
	sortByID(ended) // a batch's requests are settled in its order
	for _, f := range ended {
		x.endLocked(f)
	}
	x.mu.Unlock()
	for _, f := range ended {
		x.ended(f)
	}
	select {
	case <-x.dead:
	default:
		close(x.dead)
	}
}

// settle sets the outcome of an ended request from what its flight says: the rules, and the
// error of a failure (why it was stopped, the fatal error it hit, or the worker's fate).
// The caller owns the call: at concurrency 1 the reader, above 1 the request's goroutine.
func (x *Exchange) settle(f *flight, fate error) {
	x.mu.Lock()
	unread, stopped, fatal := f.unread, f.stopped, f.fatal
	x.mu.Unlock()
	c := f.call
	switch {
	case c.Outcome == Answered && stopped == nil:
	case unread:
		c.Outcome, c.Err = Unread, nil
	case stopped != nil:
		c.Outcome, c.Err = Failed, stopped
	case fatal:
		c.Outcome, c.Err = Failed, x.w.fatal(f.id, c.Frame)
	default:
		c.Outcome, c.Err = Failed, fate
	}
}

// stop stops a request before its end for why (exec_timeout, its client left or reads too
// slowly): above 1 the worker is told to cancel it (CANCEL) and killed if it has not ended it
// within the grace; at 1, where the worker cannot cancel, the worker is killed.
func (x *Exchange) stop(f *flight, why error) {
	x.mu.Lock()
	if f.ended || f.cancelled {
		x.mu.Unlock()
		return
	}
	if f.stopped == nil {
		f.stopped = why
	}
	f.cancelled = true // what else comes for it is dropped
	if x.conc == 1 {
		if x.fate == nil {
			x.fate = why
		}
		x.mu.Unlock()
		x.w.Kill()
		return
	}
	f.queue, f.queued = nil, 0
	signal(f.notify)
	x.mu.Unlock()
	// The grace runs from now, not from when CANCEL is written: the frame waits behind any
	// write in progress (a request's body is part of its REQUEST frame), which a worker that
	// reads nothing never ends.
	time.AfterFunc(x.grace, func() {
		x.mu.Lock()
		ended := f.ended
		x.mu.Unlock()
		if !ended {
			x.w.log.Error("killing the worker: a cancelled request did not end; it blocks the worker", "request", f.id, "grace", x.grace.String())
			x.w.Kill()
		}
	})
	x.wmu.Lock()
	_ = x.w.toPHP.SetWriteDeadline(time.Now().Add(x.grace))
	_, err := x.w.toPHP.Write(protocol.AppendFrame(nil, protocol.TypeCancel, f.id, nil))
	x.wmu.Unlock()
	if err != nil {
		x.w.Kill()
	}
}

// violation kills the worker for a broken answer, found by a request's goroutine.
func (x *Exchange) violation(format string, args ...any) error {
	err := fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, args...))
	x.mu.Lock()
	if x.fate == nil {
		x.fate = err
	}
	x.mu.Unlock()
	x.w.Kill()
	return err
}

// fateOr is the worker's fate, or def while there is none.
func (x *Exchange) fateOr(def error) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.fate != nil {
		return x.fate
	}
	return def
}

// fatal logs and returns the error of a request that ended its worker's process before its
// answer (a fatal error in PHP, which the worker names in its last word): the client gets 500.
func (w *Worker) fatal(id uint32, frame []byte) error {
	method, path := requestLine(frame)
	w.log.Error("a request hit a fatal error in PHP: it gets 500; its worker exits, and the worker's other requests in flight fail with it",
		"request", id, "method", method, "path", path) // the logger carries the pid
	return fmt.Errorf("%w: request %d (%s %s)", ErrFatal, id, method, path)
}

// requestLine is the method and path of a REQUEST frame (docs/protocol.md, "REQUEST payload"),
// for the log; empty where the frame is cut short.
func requestLine(frame []byte) (method, path string) {
	if len(frame) < protocol.HeaderSize+4 {
		return "", ""
	}
	head := frame[protocol.HeaderSize+4:]
	if n := int(binary.LittleEndian.Uint32(frame[protocol.HeaderSize:])); n < len(head) {
		head = head[:n]
	}
	fields := bytes.SplitN(head, []byte{0}, 4)
	if len(fields) < 3 {
		return "", ""
	}
	return string(fields[0]), string(fields[2])
}

func sortByID(fs []*flight) {
	slices.SortFunc(fs, func(a, b *flight) int { return cmp.Compare(a.id, b.id) })
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
