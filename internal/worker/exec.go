package worker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/peregrinephp/peregrine/internal/protocol"
)

// maxBatchBytes is how much of a batch is copied into one write; larger frames go on their own.
const maxBatchBytes = 256 << 10

// Exec hands the REQUEST frames to the worker, several in one write, and reads the responses in
// order, calling answer for each as soon as it arrives. The frames' request ids are overwritten
// with ids of the worker's own. timeout bounds each request's run, measured from the moment the
// previous one was answered.
//
// It returns how many requests were answered. With a nil error that is all of them. Otherwise
// the worker is dead or killed, and the error says what happened to request number `answered`:
// with ErrExecTimeout it was running too long; with ErrExited or ErrProtocol it was running when
// the worker failed, unless started is false, in which case none of the batch reached PHP.
// Requests after it never started.
func (w *Worker) Exec(frames [][]byte, timeout time.Duration, answer func(i int, payload []byte)) (answered int, started bool, err error) {
	firstID := w.nextID + 1
	for _, f := range frames {
		w.nextID++
		binary.LittleEndian.PutUint32(f[4:8], w.nextID)
	}
	if err := w.send(frames); err != nil {
		w.Kill()
		<-w.exited
		return 0, false, fmt.Errorf("%w: write request: %w%s", ErrExited, err, w.describeExit())
	}
	for i := range frames {
		if timeout > 0 {
			_ = w.fromPHP.SetReadDeadline(time.Now().Add(timeout))
		}
		h, payload, err := protocol.ReadFrame(w.in, w.opts.MaxFrame)
		if err != nil {
			return i, true, w.fail(err, timeout)
		}
		switch {
		case h.Type == protocol.TypeError:
			w.Kill()
			<-w.exited
			return i, true, fmt.Errorf("%w: the worker reported: %s", ErrProtocol, payload)
		case h.Type != protocol.TypeResponse:
			w.Kill()
			<-w.exited
			return i, true, fmt.Errorf("%w: got a %s frame where a RESPONSE was due", ErrProtocol, h.Type)
		case h.ID != firstID+uint32(i):
			w.Kill()
			<-w.exited
			return i, true, fmt.Errorf("%w: RESPONSE for request %d, want %d", ErrProtocol, h.ID, firstID+uint32(i))
		}
		answer(i, payload)
	}
	return len(frames), true, nil
}

func (w *Worker) send(frames [][]byte) error {
	if len(frames) == 1 {
		_, err := w.toPHP.Write(frames[0])
		return err
	}
	w.out = w.out[:0]
	for _, f := range frames {
		if len(w.out)+len(f) > maxBatchBytes && len(w.out) > 0 {
			if _, err := w.toPHP.Write(w.out); err != nil {
				return err
			}
			w.out = w.out[:0]
		}
		if len(f) > maxBatchBytes {
			if _, err := w.toPHP.Write(f); err != nil {
				return err
			}
			continue
		}
		w.out = append(w.out, f...)
	}
	if len(w.out) > 0 {
		_, err := w.toPHP.Write(w.out)
		return err
	}
	return nil
}

// fail turns a read error into the error Exec reports, killing the worker where it still runs.
func (w *Worker) fail(err error, timeout time.Duration) error {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		w.Kill()
		<-w.exited
		return fmt.Errorf("%w (%s)", ErrExecTimeout, timeout)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, os.ErrClosed):
		select {
		case <-w.exited:
		case <-time.After(time.Second):
			// The pipe closed but the process lingers: it closed fd 4 itself.
			w.Kill()
			<-w.exited
		}
		return fmt.Errorf("%w%s", ErrExited, w.describeExit())
	default:
		w.Kill()
		<-w.exited
		return fmt.Errorf("%w: %w; the worker wrote garbage on its protocol pipe%s", ErrProtocol, err, w.describeExit())
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
