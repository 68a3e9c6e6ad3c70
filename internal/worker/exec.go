package worker

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/peregrinephp/peregrine/internal/protocol"
)

// PipeBuffer is the capacity of a pipe on Linux: a batch of frames that fits is written with one
// write that never waits for PHP.
const PipeBuffer = 64 << 10

// run is the batch a worker runs at concurrency 1, kept between Exec and Finish.
type run struct {
	ctx     context.Context
	calls   []*Call
	flights []flight // reused: the table points into it while the batch runs
	next    int      // the first flight not ended: the request whose answer or DONE is awaited
	settled func(i int)
	timeout time.Duration
	headID  uint32      // the request the deadline is for
	pending chan error  // the rest of the write, when it could not be done at once
	stop    func() bool // unregisters the kill on ctx
}

// head is the request whose answer or DONE the worker owes now, nil once every one has ended.
func (r *run) head() *flight {
	for r.next < len(r.flights) && r.flights[r.next].ended {
		r.next++
	}
	if r.next < len(r.flights) {
		return &r.flights[r.next]
	}
	return nil
}

// Exec runs calls on a worker at concurrency 1: it writes their frames, the whole batch in one
// write where it can, and reads the answers from the calling goroutine, handing each frame to
// its call's Answer as it arrives and calling settled(i), if not nil, as soon as call i has its
// outcome: its answer is complete, or it ended unanswered. timeout bounds each request from the
// moment the worker is free to read it (the previous request's DONE) to its own DONE, the work
// PHP does after its answer (fastcgi_finish_request()) included; past it, and when ctx is
// cancelled, the worker is killed: a worker that runs one request at a time cannot cancel one.
//
// Exec never lets a write block the reads: what cannot be written at once goes on from another
// goroutine while the answers are read, so a worker that answers before reading its whole
// request cannot deadlock with the server.
//
// Exec returns done once every call has its Outcome. But when call lead's answer is complete
// and the rest of the exchange must wait on PHP (the request's work after its answer, later
// calls of the batch), it returns early with done false: its caller can give the answer to its
// client, and must call Finish, from any goroutine, to see the exchange through. A negative lead
// never returns early.
//
// err is the worker's fate once the exchange is done: nil when it can take more requests;
// otherwise it wraps ErrExiting (it said it exits), ErrExited, ErrExecTimeout, ErrProtocol or
// ErrAbandoned, and the worker is dead, killed or exiting.
func (x *Exchange) Exec(ctx context.Context, calls []*Call, timeout time.Duration, lead int, settled func(i int)) (done bool, err error) {
	for _, c := range calls {
		c.Outcome, c.Err = Unread, nil
	}
	w := x.w
	if err := w.checkQuiet(); err != nil {
		x.mu.Lock()
		x.closed = true
		if x.fate == nil {
			x.fate = err
		}
		x.mu.Unlock()
		for i := range calls { // none was written
			if settled != nil {
				settled(i)
			}
			if x.onEnd != nil {
				x.onEnd(err)
			}
		}
		return true, err
	}
	r := &x.run
	if cap(r.flights) < len(calls) {
		r.flights = make([]flight, len(calls))
	}
	r.flights = r.flights[:len(calls)]
	r.ctx, r.calls, r.next, r.settled, r.timeout, r.headID = ctx, calls, 0, settled, timeout, 0
	x.mu.Lock()
	for i, c := range calls {
		r.flights[i] = flight{index: i}
		x.registerLocked(&r.flights[i], c)
		c.Hold() // the writer's, until it is done with c
	}
	x.mu.Unlock()
	if ctx.Done() != nil {
		r.stop = context.AfterFunc(ctx, w.Kill)
	}
	deadline := time.Time{}
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	_ = w.toPHP.SetWriteDeadline(deadline)
	wrote, writeErr := w.writeAtOnce(calls)
	switch {
	case writeErr != nil && wrote == 0:
		// Nothing reached PHP: every call is unread.
		w.Kill()
		<-w.exited
		dropAll(calls)
		x.mu.Lock()
		x.said, x.lastRead = true, r.flights[0].id-1 // it read none of them
		x.mu.Unlock()
		x.end(fmt.Errorf("%w: write request: %w%s", ErrExited, writeErr, w.describeExit()))
		return true, x.endRun()
	case writeErr == nil && wrote < w.batchLen(calls) || calls[0].Body != nil:
		r.pending = make(chan error, 1)
		go func() { r.pending <- w.writeRest(calls, wrote) }()
	default:
		dropAll(calls)
	}
	return x.readRun(lead)
}

// Finish sees through an exchange that Exec left early, and returns the worker's fate as Exec
// would have.
func (x *Exchange) Finish(settled func(i int)) error {
	x.run.settled = settled
	_, err := x.readRun(-1)
	return err
}

// readRun is the reader at concurrency 1, run by the caller: it takes frames until every call
// of the batch has ended, or until call lead is answered and what follows is not in the buffer
// yet (false).
func (x *Exchange) readRun(lead int) (done bool, err error) {
	r, w := &x.run, x.w
	for {
		x.mu.Lock()
		head, said := r.head(), x.said
		x.mu.Unlock()
		switch {
		case said: // at concurrency 1 the worker's last word is its last frame
			x.end(x.fateOr(ErrExiting))
			return true, x.endRun()
		case head == nil:
			return true, x.endRun()
		case head.id != r.headID:
			// exec_timeout runs from the moment the worker may read the request.
			r.headID = head.id
			deadline := time.Time{}
			if r.timeout > 0 {
				deadline = time.Now().Add(r.timeout)
			}
			_ = w.setReadDeadline(deadline)
		}
		if !x.step(r.ctx) {
			return true, x.endRun()
		}
		if lead >= 0 && r.calls[lead].Outcome == Answered {
			if w.in.Buffered() < protocol.HeaderSize {
				return false, nil
			}
			lead = -1
		}
	}
}

// endRun ends the batch with the worker's fate: it waits for the writer, which a worker that
// exits or was killed unblocks, and turns a writer's failure under a healthy worker into the
// protocol violation it is. Then, the writer done and every request ended, the requests'
// bytes are free and their capacity goes back (release).
func (x *Exchange) endRun() error {
	r, w := &x.run, x.w
	fate := x.fateOr(nil)
	if r.stop != nil {
		r.stop()
	}
	if r.pending != nil {
		if fate != nil {
			// Whatever the worker did not read stays unread: end the write now.
			_ = w.toPHP.Close()
		}
		// PHP discards what it did not read of a body before it reads on; the writer ends soon.
		if err := <-r.pending; err != nil && fate == nil {
			w.Kill()
			<-w.exited
			fate = fmt.Errorf("%w: the worker answered but did not take its whole request: %w", ErrProtocol, err)
			x.mu.Lock()
			x.fate, x.closed = fate, true
			x.mu.Unlock()
		}
		dropAll(r.calls) // the writer is done with them
	}
	// The last release may give the worker to another goroutine's Exec: the batch is over first.
	calls := r.calls
	clear(r.flights)
	*r = run{flights: r.flights[:0]}
	for _, c := range calls {
		x.release(c, fate)
	}
	return fate
}

func dropAll(calls []*Call) {
	for _, c := range calls {
		c.Drop()
	}
}

// batchLen is the number of bytes of the calls' frames held in memory.
func (w *Worker) batchLen(calls []*Call) int {
	n := 0
	for _, c := range calls {
		n += len(c.Frame)
	}
	return n
}

// writeAtOnce writes as much of the calls' frames as the pipe takes at once, without waiting: one
// frame as it is, several copied into one buffer first. It returns how many bytes it wrote.
func (w *Worker) writeAtOnce(calls []*Call) (int, error) {
	buf := calls[0].Frame
	if len(calls) > 1 {
		w.out = w.out[:0]
		for _, c := range calls {
			w.out = append(w.out, c.Frame...)
		}
		buf = w.out
	}
	rc, err := w.toPHP.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var werr error
	if err := rc.Write(func(fd uintptr) bool {
		n, werr = syscall.Write(int(fd), buf)
		return true
	}); err != nil {
		return 0, err
	}
	if werr == syscall.EAGAIN {
		return 0, nil
	}
	if werr != nil {
		return 0, werr
	}
	return n, nil
}

// writeRest writes what writeAtOnce could not of the calls' frames, then the body of a lone call:
// a batch's frames, copied into w.out, have no body.
func (w *Worker) writeRest(calls []*Call, wrote int) error {
	if len(calls) > 1 {
		_, err := w.toPHP.Write(w.out[wrote:])
		return err
	}
	return w.writeCall(calls[0], wrote)
}
