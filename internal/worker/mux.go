package worker

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/peregrinephp/peregrine/internal/protocol"
)

// Mux runs requests on a worker that takes several at once (workers.concurrency above 1;
// docs/protocol.md, "Concurrent requests"): each REQUEST frame is written as soon as its request
// comes, and the frames of the answers interleave, told apart by their ids. One goroutine reads
// the worker's frames and queues each for its request's goroutine, which feeds its Answer: a slow
// client holds up only its own request, never the worker.
//
// A request's life in a Mux:
//
//	       Do writes REQUEST          last answer frame              DONE
//	(new) ──────────────────> running ─────────────────> answered ───────────> ended (onEnd)
//	                            │  exec_timeout, client gone: CANCEL           ^
//	                            └──────────────> cancelled ────────────────────┘ DONE, or the worker
//	                                                                             is killed after grace
//	The worker dies or breaks the protocol: every request not ended ends; one not answered failed.
//	DONE with LAST before a request's answer: a fatal error in its fiber took the process; that
//	request fails with ErrFatal (500), the others when the process is gone (502).
//
// onEnd is called exactly once per Do, when its request has ended (or was never written), with
// the worker's fate: nil while it serves on, ErrExiting once it said it exits (DONE with LAST),
// or why it died.
type Mux struct {
	w     *Worker
	onEnd func(fate error)
	grace time.Duration // how long a cancelled request may take to end before its worker is killed

	wmu sync.Mutex // one writer at a time: frames never interleave on the pipe

	mu     sync.Mutex
	calls  map[uint32]*muxCall
	closed bool  // the worker died or said it exits: Do writes nothing more
	fate   error // why it closed
	dead   chan struct{}
}

// maxQueued bounds the answer bytes waiting for one request's goroutine (its client reads too
// slowly): past it the request is cancelled rather than the worker's memory held.
const maxQueued = 16 << 20

type muxFrame struct {
	typ     protocol.Type
	flags   uint16
	payload []byte
}

// muxCall is one request in a Mux; its fields are guarded by Mux.mu.
type muxCall struct {
	id        uint32
	queue     []muxFrame
	queued    int
	answered  bool // the reader saw its answer's last frame
	cancelled bool // CANCEL was sent: what else comes for it is dropped
	expired   bool // exec_timeout passed before its answer
	fatal     bool // DONE with LAST came before its answer: it ended the process (a fatal error)
	unread    bool // the worker's last word says it never read this request: it may run elsewhere
	ended     bool
	timer     *time.Timer
	notify    chan struct{} // cap 1: the queue grew, or the call ended or expired
}

// NewMux starts reading w's frames. Killing the worker (ctx's end, a protocol violation) ends
// every request; the Mux is done once Dead is closed.
func NewMux(ctx context.Context, w *Worker, grace time.Duration, onEnd func(fate error)) *Mux {
	m := &Mux{w: w, onEnd: onEnd, grace: grace, calls: map[uint32]*muxCall{}, dead: make(chan struct{})}
	stop := context.AfterFunc(ctx, w.Kill)
	go func() {
		defer stop()
		m.read()
	}()
	return m
}

// Dead is closed once the worker can run nothing more: it died, broke the protocol, or said it
// exits and ended its last request.
func (m *Mux) Dead() <-chan struct{} { return m.dead }

// Do runs call: it writes its REQUEST at once, then feeds call.Answer with its answer's frames
// and returns when the answer is complete, or when it failed (call.Outcome says which), or
// unread when the worker takes no more requests. exec_timeout (timeout) runs from the write to
// the request's DONE; past it the worker gets CANCEL, and the call fails with ErrExecTimeout if
// its answer was not complete. Cancelling ctx (the client left) cancels the request too.
func (m *Mux) Do(ctx context.Context, call *Call, timeout time.Duration) {
	call.Outcome, call.Err = Unread, nil
	mc := &muxCall{notify: make(chan struct{}, 1)}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		m.onEnd(m.fateOr(ErrExiting))
		return
	}
	m.w.nextID++
	mc.id = m.w.nextID
	m.calls[mc.id] = mc
	if timeout > 0 {
		mc.timer = time.AfterFunc(timeout, func() { m.expire(mc) })
	}
	m.mu.Unlock()
	binary.LittleEndian.PutUint32(call.Frame[4:8], mc.id)

	if err := m.write(call, timeout); err != nil {
		m.w.Kill()
		<-m.dead
		m.mu.Lock()
		unread := mc.unread
		m.mu.Unlock()
		if unread { // the worker said it read nothing after an earlier request, and exited
			return
		}
		call.Outcome, call.Err = Failed, fmt.Errorf("%w: write request: %w", m.fateOr(ErrExited), err)
		return
	}
	m.deliver(ctx, call, mc)
}

// write sends the call's frame and body whole, between other requests' frames.
func (m *Mux) write(call *Call, timeout time.Duration) error {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	deadline := time.Time{}
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	_ = m.w.toPHP.SetWriteDeadline(deadline)
	if _, err := m.w.toPHP.Write(call.Frame); err != nil {
		return err
	}
	if call.Body != nil {
		if _, err := io.Copy(m.w.toPHP, call.Body); err != nil {
			return err
		}
	}
	return nil
}

// deliver hands the queued frames to call.Answer in order until the answer is complete.
func (m *Mux) deliver(ctx context.Context, call *Call, mc *muxCall) {
	gotResponse := false
	for {
		select {
		case <-mc.notify:
		case <-ctx.Done():
			m.cancel(mc)
			call.Outcome, call.Err = Failed, fmt.Errorf("%w: %w", ErrAbandoned, context.Cause(ctx))
			return
		}
		m.mu.Lock()
		frames := mc.queue
		mc.queue, mc.queued = nil, 0
		ended, expired, fatal, unread := mc.ended, mc.expired, mc.fatal, mc.unread
		m.mu.Unlock()
		if unread {
			call.Outcome, call.Err = Unread, nil
			return
		}
		for _, f := range frames {
			switch {
			case f.typ == protocol.TypeHints && !gotResponse,
				f.typ == protocol.TypeResponse && !gotResponse,
				f.typ == protocol.TypeBody && gotResponse:
			default:
				call.Outcome, call.Err = Failed, m.violation("a %s frame out of place for request %d", f.typ, mc.id)
				return
			}
			if err := call.Answer.Frame(f.typ, f.flags, f.payload); err != nil {
				if errors.Is(err, ErrAbandoned) {
					m.cancel(mc)
					call.Outcome, call.Err = Failed, err
					return
				}
				call.Outcome, call.Err = Failed, m.violation("%s frame for request %d: %v", f.typ, mc.id, err)
				return
			}
			if f.typ == protocol.TypeHints {
				continue
			}
			gotResponse = true
			if f.flags&protocol.FlagMore == 0 {
				call.Outcome = Answered
				return
			}
		}
		switch {
		case expired:
			call.Outcome, call.Err = Failed, ErrExecTimeout
			return
		case fatal:
			method, path := requestLine(call.Frame)
			m.w.log.Error("a request hit a fatal error in PHP: it gets 500; its worker exits, and the worker's other requests in flight fail with it",
				"request", mc.id, "method", method, "path", path) // the logger carries the pid
			call.Outcome, call.Err = Failed, fmt.Errorf("%w: request %d (%s %s)", ErrFatal, mc.id, method, path)
			return
		case ended:
			call.Outcome, call.Err = Failed, m.fateOr(ErrExited)
			return
		}
	}
}

// expire is exec_timeout for mc: the request is cancelled, and a caller still waiting for its
// answer fails.
func (m *Mux) expire(mc *muxCall) {
	m.mu.Lock()
	if mc.ended {
		m.mu.Unlock()
		return
	}
	mc.expired = true
	signal(mc.notify)
	m.mu.Unlock()
	m.w.log.Warn("request past exec_timeout: cancelling it", "pid", m.w.pid, "request", mc.id)
	m.cancel(mc)
}

// cancel tells the worker to stop mc (CANCEL) and kills the worker if mc has not ended within
// the grace: a request that does not yield blocks the whole worker.
func (m *Mux) cancel(mc *muxCall) {
	m.mu.Lock()
	if mc.ended || mc.cancelled {
		m.mu.Unlock()
		return
	}
	mc.cancelled = true
	mc.queue, mc.queued = nil, 0
	m.mu.Unlock()
	m.wmu.Lock()
	_ = m.w.toPHP.SetWriteDeadline(time.Now().Add(m.grace))
	_, err := m.w.toPHP.Write(protocol.AppendFrame(nil, protocol.TypeCancel, mc.id, nil))
	m.wmu.Unlock()
	if err != nil {
		m.w.Kill()
		return
	}
	time.AfterFunc(m.grace, func() {
		m.mu.Lock()
		ended := mc.ended
		m.mu.Unlock()
		if !ended {
			m.w.log.Error("killing the worker: a cancelled request did not end; it blocks the worker", "pid", m.w.pid, "request", mc.id, "grace", m.grace.String())
			m.w.Kill()
		}
	})
}

// read is the reader goroutine: it queues each answer frame for its request and ends requests on
// DONE, until the worker dies or breaks the protocol.
func (m *Mux) read() {
	for {
		h, payload, err := m.w.readFrame()
		if err != nil {
			m.die(m.w.fail(context.Background(), err))
			return
		}
		if err := m.take(h, payload); err != nil {
			m.w.Kill()
			<-m.w.exited
			m.die(err)
			return
		}
	}
}

// take handles one frame from the worker.
func (m *Mux) take(h protocol.Header, payload []byte) error {
	switch h.Type {
	case protocol.TypeError:
		return fmt.Errorf("%w: the worker reported: %s", ErrProtocol, payload)
	case protocol.TypeHints, protocol.TypeResponse, protocol.TypeBody, protocol.TypeDone:
	default:
		return fmt.Errorf("%w: a %s frame from the worker", ErrProtocol, h.Type)
	}
	m.mu.Lock()
	mc := m.calls[h.ID]
	var unread []*muxCall
	if h.Type == protocol.TypeDone && h.Flags&protocol.FlagLast != 0 {
		if len(payload) != 0 && len(payload) != 4 {
			m.mu.Unlock()
			return fmt.Errorf("%w: a DONE with a %d-byte payload", ErrProtocol, len(payload))
		}
		if len(payload) == 4 {
			unread = m.unreadLocked(binary.LittleEndian.Uint32(payload))
		}
	}
	defer func() {
		for range unread {
			m.onEnd(m.fateOr(ErrExiting))
		}
	}()
	switch {
	case mc == nil && h.Type == protocol.TypeDone && h.Flags&protocol.FlagLast != 0:
		// The worker's last word as it exits (a fatal error took the process, its script
		// ended): what runs on it fails when it is gone, nothing new is written to it.
		m.closed = true
		if m.fate == nil {
			m.fate = fmt.Errorf("%w after request %d", ErrExiting, h.ID)
		}
		m.mu.Unlock()
		return nil
	case mc == nil:
		m.mu.Unlock()
		return fmt.Errorf("%w: a %s frame for request %d, which is not running", ErrProtocol, h.Type, h.ID)
	case h.Type == protocol.TypeDone:
		last, unanswered := h.Flags&protocol.FlagLast != 0, !mc.answered && !mc.cancelled
		if unanswered && !last {
			m.mu.Unlock()
			return fmt.Errorf("%w: DONE for request %d before its answer", ErrProtocol, h.ID)
		}
		fate := error(nil)
		if last {
			m.closed = true
			m.fate = fmt.Errorf("%w after request %d", ErrExiting, h.ID)
			if unanswered { // the worker names the request whose fiber a fatal error stopped
				mc.fatal = true
				m.fate = fmt.Errorf("%w: request %d hit a fatal error", ErrExiting, h.ID)
			}
			fate = m.fate
		}
		m.endLocked(mc)
		m.mu.Unlock()
		m.onEnd(fate)
		return nil
	case mc.answered:
		m.mu.Unlock()
		return fmt.Errorf("%w: a %s frame for request %d after its answer", ErrProtocol, h.Type, h.ID)
	case mc.cancelled:
		m.mu.Unlock()
		return nil // dropped: its caller is gone
	}
	if h.Type != protocol.TypeHints && h.Flags&protocol.FlagMore == 0 {
		mc.answered = true
	}
	mc.queued += len(payload)
	over := mc.queued > maxQueued
	if !over {
		mc.queue = append(mc.queue, muxFrame{h.Type, h.Flags, append([]byte(nil), payload...)})
		signal(mc.notify)
	}
	m.mu.Unlock()
	if over {
		m.w.log.Warn("cancelling a request whose client reads too slowly", "pid", m.w.pid, "request", mc.id, "queued", mc.queued)
		m.cancel(mc)
		m.mu.Lock()
		mc.expired = true // its caller fails it
		signal(mc.notify)
		m.mu.Unlock()
	}
	return nil
}

// unreadLocked ends the requests written after lastRead, which the worker's last word says it
// never read, as unread: the pool gives them to another worker. It returns them, for onEnd.
func (m *Mux) unreadLocked(lastRead uint32) []*muxCall {
	var unread []*muxCall
	for id, mc := range m.calls {
		if id > lastRead && !mc.ended {
			mc.unread = true
			unread = append(unread, mc)
		}
	}
	for _, mc := range unread {
		m.endLocked(mc)
	}
	return unread
}

// endLocked ends mc: its caller, if still waiting, sees it.
func (m *Mux) endLocked(mc *muxCall) {
	mc.ended = true
	if mc.timer != nil {
		mc.timer.Stop()
	}
	delete(m.calls, mc.id)
	signal(mc.notify)
}

// die ends every request still running with the worker's fate.
func (m *Mux) die(fate error) {
	m.mu.Lock()
	m.closed = true
	if m.fate == nil { // a fate said before (LAST, a violation) is the truer one
		m.fate = fate
	}
	ended := make([]*muxCall, 0, len(m.calls))
	for _, mc := range m.calls {
		ended = append(ended, mc)
	}
	for _, mc := range ended {
		m.endLocked(mc)
	}
	fate = m.fate
	m.mu.Unlock()
	close(m.dead)
	for range ended {
		m.onEnd(fate)
	}
}

// violation kills the worker for a broken answer, found by a request's goroutine.
func (m *Mux) violation(format string, args ...any) error {
	err := fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, args...))
	m.mu.Lock()
	if m.fate == nil {
		m.fate = err
	}
	m.mu.Unlock()
	m.w.Kill()
	return err
}

// fateOr is the worker's fate, or def while there is none.
func (m *Mux) fateOr(def error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fate != nil {
		return m.fate
	}
	return def
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

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
