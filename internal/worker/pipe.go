package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/peregrinephp/peregrine/internal/protocol"
)

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
		w.awaitExit()
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
		return fmt.Errorf("%w: the worker was killed", ErrExecTimeout)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		// The pipe closed: the process is exiting, or it closed fd 4 itself and lingers.
		w.awaitExit()
		return fmt.Errorf("%w%s", ErrExited, w.describeExit())
	default:
		w.Kill()
		<-w.exited
		return fmt.Errorf("%w: %w%s", ErrProtocol, err, w.describeExit())
	}
}

// awaitExit waits for a worker that closed its protocol pipe to exit, and kills it if it lingers
// a second: it may have closed fd 4 itself.
func (w *Worker) awaitExit() {
	select {
	case <-w.exited:
	case <-time.After(time.Second):
		w.Kill()
		<-w.exited
	}
}
