package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/peregrinephp/peregrine/internal/protocol"
)

// read is the reader goroutine of a worker above concurrency 1: the reader's steps until the
// worker dies or breaks the protocol.
func (x *Exchange) read() {
	for x.step(context.Background()) {
	}
}

// Do runs call on a worker above concurrency 1 (docs/protocol.md, "Concurrent requests"): it
// writes its REQUEST at once, then feeds call.Answer with its answer's frames and returns when
// the answer is complete, or when it failed (call.Outcome says which), or unread when the worker
// takes no more requests. exec_timeout (timeout) runs from the write to the request's DONE; past
// it the request is stopped (Exchange.stop), and the call fails with ErrExecTimeout if its answer
// was not complete. Cancelling ctx (the client left) stops the request too.
func (x *Exchange) Do(ctx context.Context, call *Call, timeout time.Duration) {
	call.Outcome, call.Err = Unread, nil
	call.Hold() // the writer's; the log of a fatal error reads the frame too
	defer call.Drop()
	f := &flight{notify: make(chan struct{}, 1)}
	written, err := x.write(f, call, timeout)
	if !written && err == nil {
		x.onEnd(x.fateOr(ErrExiting)) // closed: nothing was written
		return
	}
	if err != nil {
		x.w.Kill()
		<-x.dead
		x.settle(f, fmt.Errorf("%w: write request: %w", x.fateOr(ErrExited), err))
		return
	}
	x.deliver(ctx, f)
}

// write is the writer above concurrency 1: it gives the call its request id and writes its
// frame and body whole, in one critical section with every other write to the worker, so frames
// reach PHP in the order of their ids. written is false, with no error, when the worker takes no
// more requests (it said LAST or died): nothing was written.
func (x *Exchange) write(f *flight, call *Call, timeout time.Duration) (written bool, err error) {
	x.wmu.Lock()
	defer x.wmu.Unlock()
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return false, nil
	}
	x.registerLocked(f, call)
	if timeout > 0 {
		f.timer = time.AfterFunc(timeout, func() { x.expire(f) })
	}
	x.mu.Unlock()
	deadline := time.Time{}
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	_ = x.w.toPHP.SetWriteDeadline(deadline)
	return true, x.w.writeCall(call, 0)
}

// deliver hands the queued frames to call.Answer in order until the answer is complete, or the
// request ended or was stopped without it.
func (x *Exchange) deliver(ctx context.Context, f *flight) {
	call := f.call
	for {
		select {
		case <-f.notify:
		case <-ctx.Done():
			why := fmt.Errorf("%w: %w", ErrAbandoned, context.Cause(ctx))
			x.stop(f, why)
			call.Outcome, call.Err = Failed, why
			return
		}
		x.mu.Lock()
		frames := f.queue
		f.queue, f.queued = nil, 0
		ended, stopped := f.ended, f.stopped
		x.mu.Unlock()
		for _, fr := range frames {
			if err := call.Answer.Frame(fr.typ, fr.flags, fr.payload); err != nil {
				if errors.Is(err, ErrAbandoned) {
					x.stop(f, err)
				} else {
					err = x.violation("%s frame for request %d: %v", fr.typ, f.id, err)
				}
				call.Outcome, call.Err = Failed, err
				return
			}
			if fr.typ != protocol.TypeHints && fr.flags&protocol.FlagMore == 0 {
				call.Outcome = Answered
				return
			}
		}
		if ended || stopped != nil {
			x.settle(f, x.fateOr(ErrExited))
			return
		}
	}
}

// expire is exec_timeout for f, above concurrency 1: the request is stopped, and a caller
// still waiting for its answer fails.
func (x *Exchange) expire(f *flight) {
	x.mu.Lock()
	ended := f.ended
	x.mu.Unlock()
	if ended {
		return
	}
	x.w.log.Warn("request past exec_timeout: cancelling it", "request", f.id)
	x.stop(f, fmt.Errorf("%w: %w", ErrExecTimeout, ErrCancelled))
}
