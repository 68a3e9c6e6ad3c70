package worker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/peregrinephp/peregrine/internal/protocol"
)

// Call is one request for a worker and where its answer goes.
type Call struct {
	// Frame is the REQUEST frame: the whole frame, or, when Body is set, its header and head
	// (the frame's length counts the body). Exec overwrites its request id.
	Frame []byte
	// Body, if set, supplies the rest of the frame, read to its end.
	Body io.Reader
	// Answer receives the frames of the answer as they arrive.
	Answer Answer

	// Outcome is what became of the call, set by Exec (and Finish).
	Outcome Outcome
	// Err says why, when Outcome is Failed: it wraps ErrExecTimeout, ErrExited, ErrProtocol or
	// ErrAbandoned.
	Err error
}

// Outcome is what became of one Call. The worker says it (docs/protocol.md): an answer ends
// with a frame without MORE, a request with DONE, and DONE with LAST means the worker read no
// request after that one. The pool never has to infer it.
//
//	call      what the worker said                                outcome
//	written   its answer's last frame                             Answered (the client has it)
//	written   nothing, then DONE+LAST for an earlier request       Unread   (it may run elsewhere)
//	written   nothing, and it died or was killed                  Failed   (PHP may have begun it)
//	written   part of its answer, then died or was killed          Failed
//	not yet   (Exec stopped before it: a failure, a LAST)          Unread
type Outcome uint8

// Outcomes of a Call.
const (
	// Unread: PHP never read the request; it may safely run on another worker.
	Unread Outcome = iota
	// Answered: the whole answer reached the Answer.
	Answered
	// Failed: PHP may have begun the request and its answer is not complete; Err says why.
	Failed
)

// Answer receives the frames of one request's answer: HINTS frames, one RESPONSE, then BODY
// frames while the previous one had protocol.FlagMore. Exec has checked their type, order, id
// and size; payload is valid only during the call. An error says the payload is malformed,
// which Exec treats as a protocol violation.
type Answer interface {
	Frame(t protocol.Type, flags uint16, payload []byte) error
}

// PipeBuffer is the capacity of a pipe on Linux: a batch of frames that fits is written with one
// write that never waits for PHP.
const PipeBuffer = 64 << 10

// exchange is the batch of calls a worker is running, kept between Exec and Finish.
type exchange struct {
	ctx      context.Context
	calls    []*Call
	firstID  uint32
	timeout  time.Duration
	deadline time.Time   // of the current call's request
	next     int         // the call whose answer or DONE is awaited
	answered bool        // calls[next]'s answer is complete; its DONE is awaited
	pending  chan error  // the rest of the write, when it could not be done at once
	stop     func() bool // unregisters the kill on ctx
}

// Exec runs calls on the worker: it writes their frames, the whole batch in one write where it
// can, and reads the answers in order, handing each frame to its call's Answer as it arrives
// and calling answered(i), if not nil, as soon as call i's answer is complete. timeout bounds
// each request from the moment the worker is free to read it (the previous request's DONE) to
// its own DONE, the work PHP does after its answer (fastcgi_finish_request()) included;
// cancelling ctx kills the worker.
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
func (w *Worker) Exec(ctx context.Context, calls []*Call, timeout time.Duration, lead int, answered func(i int)) (done bool, err error) {
	for _, c := range calls {
		c.Outcome, c.Err = Unread, nil
	}
	if err := w.checkQuiet(); err != nil {
		return true, err
	}
	x := &w.x
	*x = exchange{ctx: ctx, calls: calls, firstID: w.nextID + 1, timeout: timeout}
	for _, c := range calls {
		w.nextID++
		binary.LittleEndian.PutUint32(c.Frame[4:8], w.nextID)
	}
	x.stop = context.AfterFunc(ctx, w.Kill)
	if timeout > 0 {
		x.deadline = time.Now().Add(timeout)
	}
	_ = w.toPHP.SetWriteDeadline(x.deadline)
	wrote, writeErr := w.write(calls)
	if writeErr != nil && wrote == 0 {
		// Nothing reached PHP: every call is Unread.
		w.Kill()
		<-w.exited
		return true, w.endExchange(fmt.Errorf("%w: write request: %w%s", ErrExited, writeErr, w.describeExit()))
	}
	if writeErr == nil && wrote < w.batchLen(calls) || calls[0].Body != nil {
		x.pending = make(chan error, 1)
		go func() { x.pending <- w.writeRest(calls, wrote) }()
	}
	return w.readExchange(lead, answered)
}

// Finish sees through an exchange that Exec left early, and returns the worker's fate as Exec
// would have.
func (w *Worker) Finish(answered func(i int)) error {
	_, err := w.readExchange(-1, answered)
	return err
}

// readExchange reads answers and DONE frames until every call has its outcome, or until call
// lead is answered and what follows is not in the buffer yet (false).
func (w *Worker) readExchange(lead int, answered func(i int)) (done bool, err error) {
	x := &w.x
	for x.next < len(x.calls) {
		i, c := x.next, x.calls[x.next]
		id := x.firstID + uint32(i)
		if !x.answered {
			unread, err := w.readAnswer(x.ctx, c, id, x.deadline)
			if unread {
				return true, w.endExchange(err)
			}
			if err != nil {
				c.Outcome, c.Err = Failed, err
				return true, w.endExchange(err)
			}
			c.Outcome, x.answered = Answered, true
			if answered != nil {
				answered(i)
			}
			if i == lead && w.in.Buffered() < protocol.HeaderSize {
				return false, nil
			}
		}
		last, err := w.readDone(x.ctx, id, x.deadline)
		if err != nil {
			return true, w.endExchange(err)
		}
		x.next++
		x.answered = false
		if last {
			return true, w.endExchange(fmt.Errorf("%w after request %d", ErrExiting, id))
		}
		if x.timeout > 0 {
			x.deadline = time.Now().Add(x.timeout)
		}
	}
	return true, w.endExchange(nil)
}

// endExchange ends the exchange with the worker's fate: it waits for the writer, which a worker
// that exits or was killed unblocks, and turns a writer's failure under a healthy worker into
// the protocol violation it is.
func (w *Worker) endExchange(fate error) error {
	x := &w.x
	if x.stop != nil {
		x.stop()
	}
	if x.pending != nil {
		if fate != nil {
			// Whatever the worker did not read stays unread: end the write now.
			_ = w.toPHP.Close()
		}
		// PHP discards what it did not read of a body before it reads on; the writer ends soon.
		if err := <-x.pending; err != nil && fate == nil {
			w.Kill()
			<-w.exited
			fate = fmt.Errorf("%w: the worker answered but did not take its whole request: %w", ErrProtocol, err)
		}
	}
	*x = exchange{}
	return fate
}

// quietProbe is checkQuiet's read of the pipe, kept in the Worker with its buffer and its
// callback so that the check, made before every exchange, allocates nothing.
type quietProbe struct {
	rc   syscall.RawConn
	read func(fd uintptr) bool // readOnce, bound once
	buf  [512]byte
	n    int
	err  error
}

func (q *quietProbe) readOnce(fd uintptr) bool {
	q.n, q.err = syscall.Read(int(fd), q.buf[:])
	return true // never wait: this only looks
}

// checkQuiet makes sure the worker wrote nothing since its last answer but, possibly, that it
// exits (DONE with LAST), and that it still runs: a worker that wrote anything else broke the
// protocol, and what it wrote must not pass for the next request's answer. It costs one read
// that does not wait, on the path of every exchange.
func (w *Worker) checkQuiet() error {
	// The last request's read deadline may have passed while the worker was idle; a raw read
	// would then fail without reading, which must not pass for an end of file.
	if err := w.fromPHP.SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("%w: %w", ErrExited, err)
	}
	var n int
	var rerr error
	if w.in.Buffered() == 0 {
		q := &w.quiet
		if q.rc == nil {
			rc, err := w.fromPHP.SyscallConn()
			if err != nil {
				return fmt.Errorf("%w: %w", ErrExited, err)
			}
			q.rc, q.read = rc, q.readOnce
		}
		if err := q.rc.Read(q.read); err != nil {
			w.Kill()
			<-w.exited
			return fmt.Errorf("%w: reading its protocol pipe: %w", ErrExited, err)
		}
		n, rerr = q.n, q.err
		if n > 0 {
			w.pipe.early = append(w.pipe.early[:0], q.buf[:n]...) // read first by w.in
		}
	} else {
		n, rerr = w.in.Buffered(), nil
	}
	switch {
	case n > 0:
		_ = w.setReadDeadline(time.Now().Add(time.Second))
		h, _, err := w.readFrame()
		if err == nil && h.Type == protocol.TypeDone && h.Flags&protocol.FlagLast != 0 && w.in.Buffered() == 0 && len(w.pipe.early) == 0 {
			return fmt.Errorf("%w after request %d", ErrExiting, h.ID)
		}
		w.Kill()
		<-w.exited
		return fmt.Errorf("%w: a %s frame written after the last answer", ErrProtocol, h.Type)
	case n == 0 && rerr == nil: // end of file: the worker closed its end, most likely exiting
		select {
		case <-w.exited:
		case <-time.After(time.Second):
			w.Kill()
			<-w.exited
		}
		return fmt.Errorf("%w: it closed its protocol pipe%s", ErrExited, w.describeExit())
	case w.hasExited(): // nothing to read, the pipe held open by a child it left
		return fmt.Errorf("%w%s", ErrExited, w.describeExit())
	}
	return nil
}

// pipeReader is what w.in reads: the bytes checkQuiet took from the pipe first, then the pipe.
type pipeReader struct {
	f     *os.File
	early []byte
}

func (r *pipeReader) Read(p []byte) (int, error) {
	if len(r.early) > 0 {
		n := copy(p, r.early)
		r.early = r.early[n:]
		return n, nil
	}
	return r.f.Read(p)
}

// batchLen is the number of bytes of the calls' frames held in memory.
func (w *Worker) batchLen(calls []*Call) int {
	n := 0
	for _, c := range calls {
		n += len(c.Frame)
	}
	return n
}

// write writes as much of the calls' frames as the pipe takes at once, without waiting: one
// frame as it is, several copied into one buffer first. It returns how many bytes it wrote.
func (w *Worker) write(calls []*Call) (int, error) {
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

// writeRest writes what write could not, then the body of a call that has one.
func (w *Worker) writeRest(calls []*Call, wrote int) error {
	buf := calls[0].Frame
	if len(calls) > 1 {
		buf = w.out
	}
	if wrote < len(buf) {
		if _, err := w.toPHP.Write(buf[wrote:]); err != nil {
			return err
		}
	}
	if body := calls[0].Body; body != nil && len(calls) == 1 {
		if _, err := io.Copy(w.toPHP, body); err != nil {
			return err
		}
	}
	return nil
}

// readAnswer reads the frames of one answer and hands them to c.Answer. unread says the
// worker exits without having read this request: its first frame was a DONE with LAST for an
// earlier one.
func (w *Worker) readAnswer(ctx context.Context, c *Call, id uint32, deadline time.Time) (unread bool, err error) {
	_ = w.setReadDeadline(deadline)
	gotResponse := false
	for {
		h, payload, err := w.readFrame()
		if err != nil {
			return false, w.fail(ctx, err)
		}
		switch {
		case h.Type == protocol.TypeError:
			w.Kill()
			<-w.exited
			return false, fmt.Errorf("%w: the worker reported: %s", ErrProtocol, payload)
		case h.Type == protocol.TypeDone && !gotResponse && h.ID < id && h.Flags&protocol.FlagLast != 0:
			return true, fmt.Errorf("%w after request %d", ErrExiting, h.ID)
		case h.ID != id:
			return false, w.violation("a %s frame for request %d, want %d", h.Type, h.ID, id)
		case h.Type == protocol.TypeHints && !gotResponse,
			h.Type == protocol.TypeResponse && !gotResponse,
			h.Type == protocol.TypeBody && gotResponse:
		default:
			return false, w.violation("a %s frame out of place", h.Type)
		}
		if err := c.Answer.Frame(h.Type, h.Flags, payload); err != nil {
			if errors.Is(err, ErrAbandoned) {
				w.Kill()
				<-w.exited
				return false, err
			}
			return false, w.violation("%s frame: %v", h.Type, err)
		}
		if h.Type == protocol.TypeHints {
			continue
		}
		gotResponse = true
		if h.Flags&protocol.FlagMore == 0 {
			return false, nil
		}
	}
}

// readDone reads the DONE frame that ends request id, after its answer: at once, or when PHP
// ends the work it does after answering. last says the worker exits after it.
func (w *Worker) readDone(ctx context.Context, id uint32, deadline time.Time) (last bool, err error) {
	_ = w.setReadDeadline(deadline)
	h, _, err := w.readFrame()
	switch {
	case err != nil:
		return false, w.fail(ctx, err)
	case h.Type == protocol.TypeError:
		w.Kill()
		<-w.exited
		return false, fmt.Errorf("%w: the worker reported an error after its answer", ErrProtocol)
	case h.Type != protocol.TypeDone || h.ID != id || h.Length != 0:
		return false, w.violation("a %s frame for request %d after the answer, want DONE for %d", h.Type, h.ID, id)
	}
	return h.Flags&protocol.FlagLast != 0, nil
}

func (w *Worker) violation(format string, args ...any) error {
	w.Kill()
	<-w.exited
	return fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, args...))
}

// readFrame reads one frame from the worker into the reused payload buffer, refusing a payload
// over protocol.MaxWorkerFrame before reading it. The buffer is kept for the worker's life: at
// most one frame's size, and a large answer comes in frames of that size one after another.
func (w *Worker) readFrame() (protocol.Header, []byte, error) {
	var hb [protocol.HeaderSize]byte
	if _, err := io.ReadFull(w.in, hb[:]); err != nil {
		return protocol.Header{}, nil, err
	}
	h, err := protocol.ParseHeader(hb[:])
	if err != nil {
		return h, nil, err
	}
	if h.Length > protocol.MaxWorkerFrame {
		return h, nil, fmt.Errorf("%w: %s frame of %d bytes, at most %d", protocol.ErrTooLarge, h.Type, h.Length, protocol.MaxWorkerFrame)
	}
	if cap(w.payload) < int(h.Length) {
		w.payload = make([]byte, h.Length, max(int(h.Length), 4096))
	}
	p := w.payload[:h.Length]
	if _, err := io.ReadFull(w.in, p); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return h, nil, fmt.Errorf("read %s payload: %w", h.Type, err)
	}
	return h, p, nil
}

// fail turns a read error into the error Exec reports, killing the worker where it still runs.
func (w *Worker) fail(ctx context.Context, err error) error {
	switch {
	case w.hasExited():
		return fmt.Errorf("%w%s", ErrExited, w.describeExit())
	case ctx.Err() != nil:
		<-w.exited // killed by the AfterFunc
		return fmt.Errorf("%w: killed: %w", ErrExited, context.Cause(ctx))
	case errors.Is(err, os.ErrDeadlineExceeded):
		w.Kill()
		<-w.exited
		return ErrExecTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		// The pipe closed: the process is exiting, or it closed fd 4 itself and lingers.
		select {
		case <-w.exited:
		case <-time.After(time.Second):
			w.Kill()
			<-w.exited
		}
		return fmt.Errorf("%w%s", ErrExited, w.describeExit())
	default:
		w.Kill()
		<-w.exited
		return fmt.Errorf("%w: %w%s", ErrProtocol, err, w.describeExit())
	}
}

// Wait blocks until the process has exited or ctx is done.
func (w *Worker) Wait(ctx context.Context) error {
	select {
	case <-w.exited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
