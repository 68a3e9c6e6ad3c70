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
}

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

// Exec runs calls on the worker: it writes their frames, the whole batch in one write where it
// can, and reads the answers in order, handing each frame to its call's Answer as it arrives.
// timeout bounds each request, from the moment the previous one was answered; cancelling ctx
// kills the worker. answered, if not nil, is called with a call's index as soon as its answer is
// complete.
//
// Exec never lets a write block the reads: what cannot be written at once goes on from another
// goroutine while the answers are read, so a worker that answers before reading its whole
// request cannot deadlock with the server.
//
// It returns how many calls were answered. With a nil error that is all of them. Otherwise the
// worker is dead or killed (or both) and the error says what happened to call number
// `answered`: ErrExecTimeout, ErrExited or ErrProtocol, also wrapping ErrNotStarted when no byte
// of it reached PHP. Calls after it never started: a worker answers in order.
func (w *Worker) Exec(ctx context.Context, calls []*Call, timeout time.Duration, answered func(i int)) (int, error) {
	if err := w.checkQuiet(); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNotStarted, err)
	}
	firstID := w.nextID + 1
	for _, c := range calls {
		w.nextID++
		binary.LittleEndian.PutUint32(c.Frame[4:8], w.nextID)
	}
	stop := context.AfterFunc(ctx, w.Kill)
	defer stop()

	deadline := time.Time{}
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	_ = w.toPHP.SetWriteDeadline(deadline)
	wrote, writeErr := w.write(calls)
	if writeErr != nil && wrote == 0 {
		w.Kill()
		<-w.exited
		return 0, fmt.Errorf("%w: %w: write request: %w%s", ErrNotStarted, ErrExited, writeErr, w.describeExit())
	}
	var pending chan error // the rest of the write, when it could not be done at once
	if writeErr == nil && wrote < w.batchLen(calls) || calls[0].Body != nil {
		pending = make(chan error, 1)
		go func() { pending <- w.writeRest(calls, wrote) }()
	}

	for i, c := range calls {
		if err := w.readAnswer(ctx, c, firstID+uint32(i), deadline); err != nil {
			if pending != nil {
				<-pending // the kill in readAnswer ends the write
			}
			return i, err
		}
		if answered != nil {
			answered(i)
		}
		if timeout > 0 && i+1 < len(calls) {
			deadline = time.Now().Add(timeout)
		}
	}
	if pending != nil {
		// PHP discards what it did not read of a body before it reads on; the writer ends soon.
		if err := <-pending; err != nil {
			w.Kill()
			<-w.exited
			return len(calls), fmt.Errorf("%w: the worker answered but did not take its whole request: %w", ErrProtocol, err)
		}
	}
	return len(calls), nil
}

// checkQuiet makes sure the worker wrote nothing since its last answer: a worker that did broke
// the protocol, and what it wrote must not pass for the next request's answer.
func (w *Worker) checkQuiet() error {
	if w.in.Buffered() > 0 {
		w.Kill()
		<-w.exited
		return fmt.Errorf("%w: %d bytes written after the last answer", ErrProtocol, w.in.Buffered())
	}
	if w.hasExited() {
		return fmt.Errorf("%w%s", ErrExited, w.describeExit())
	}
	// The last request's read deadline may have passed while the worker was idle; a raw read
	// would then fail without reading, which must not pass for an end of file.
	if err := w.fromPHP.SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("%w: %w", ErrExited, err)
	}
	rc, err := w.fromPHP.SyscallConn()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrExited, err)
	}
	var b [1]byte
	n, rerr := -1, error(nil)
	if err := rc.Read(func(fd uintptr) bool {
		n, rerr = syscall.Read(int(fd), b[:])
		return true // never wait: this only peeks
	}); err != nil {
		w.Kill()
		<-w.exited
		return fmt.Errorf("%w: reading its protocol pipe: %w", ErrExited, err)
	}
	switch {
	case n > 0:
		w.Kill()
		<-w.exited
		return fmt.Errorf("%w: bytes written after the last answer", ErrProtocol)
	case n == 0 && rerr == nil: // end of file: the worker closed its end, most likely exiting
		select {
		case <-w.exited:
		case <-time.After(time.Second):
			w.Kill()
			<-w.exited
		}
		return fmt.Errorf("%w: it closed its protocol pipe%s", ErrExited, w.describeExit())
	}
	return nil
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

// readAnswer reads the frames of one answer and hands them to c.Answer.
func (w *Worker) readAnswer(ctx context.Context, c *Call, id uint32, deadline time.Time) error {
	_ = w.setReadDeadline(deadline)
	gotResponse := false
	for {
		h, payload, err := w.readFrame()
		if err != nil {
			return w.fail(ctx, err)
		}
		switch {
		case h.Type == protocol.TypeError:
			w.Kill()
			<-w.exited
			return fmt.Errorf("%w: the worker reported: %s", ErrProtocol, payload)
		case h.ID != id:
			return w.violation("a %s frame for request %d, want %d", h.Type, h.ID, id)
		case h.Type == protocol.TypeHints && !gotResponse,
			h.Type == protocol.TypeResponse && !gotResponse,
			h.Type == protocol.TypeBody && gotResponse:
		default:
			return w.violation("a %s frame out of place", h.Type)
		}
		if err := c.Answer.Frame(h.Type, h.Flags, payload); err != nil {
			if errors.Is(err, ErrAbandoned) {
				w.Kill()
				<-w.exited
				return err
			}
			return w.violation("%s frame: %v", h.Type, err)
		}
		if h.Type == protocol.TypeHints {
			continue
		}
		gotResponse = true
		if h.Flags&protocol.FlagMore == 0 {
			return nil
		}
	}
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
