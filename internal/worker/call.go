package worker

import (
	"encoding/binary"
	"io"
	"sync/atomic"

	"github.com/peregrinephp/peregrine/internal/protocol"
)

// Call is one request for a worker and where its answer goes.
//
// Who owns a request's bytes (docs/protocol.md, "Who owns a request's bytes"): Frame and Body,
// and whatever the request names besides (the temporary files of its uploads), are read until
// the request has ended, not merely until its answer is complete: after its answer the worker
// may still read its body (fastcgi_finish_request(), a framework's terminate()), and the server
// still writes it. So they are released in one place, Owner.Release, called by the last Drop: each
// holder of the call (the pool while it has the call, each exchange that writes it) takes a Hold
// and drops it when it is done, and an exchange drops its hold only once its writer is done and
// the worker said the request ended (DONE), or the worker is gone. Nothing returns the frame's
// buffer to a pool or closes the body before; the caller that made the call never touches Frame
// or Body again once it has handed the call over. The Answer is handed frames only until the
// call's Exec (for a batch member, until its Outcome is set) or Exchange.Do returns; after that, the
// answer and its buffers are the caller's again.
type Call struct {
	// Frame is the REQUEST frame: the whole frame, or, when Body is set, its header and head
	// (the frame's length counts the body). Exec overwrites its request id.
	Frame []byte
	// Body, if set, holds the rest of the frame from offset 0. It is read with ReadAt, so that
	// a call that was not read (Unread) is written whole to the next worker.
	Body io.ReaderAt
	// Answer receives the frames of the answer as they arrive.
	Answer Answer
	// Owner, if set, holds the storage of Frame and Body (and of what the request names besides,
	// its uploads); the last Drop calls its Release, once.
	Owner Owner

	// Outcome is what became of the call, set by Exec (and Finish).
	Outcome Outcome
	// Err says why, when Outcome is Failed: it wraps ErrExecTimeout, ErrExited, ErrProtocol or
	// ErrAbandoned.
	Err error

	holds atomic.Int32
}

// Hold records one more holder of the call's bytes; Drop ends it.
func (c *Call) Hold() { c.holds.Add(1) }

// Drop ends a Hold; the last one calls Owner.Release. A call must be held by someone (its
// pool) whenever a new Hold is taken, so that Release runs once, after every reader is done.
func (c *Call) Drop() {
	if c.holds.Add(-1) == 0 && c.Owner != nil {
		c.Owner.Release()
	}
}

// An Owner frees the storage of a call's bytes (Call.Owner): an interface rather than a func, so
// that handing it over costs the request no allocation.
type Owner interface{ Release() }

// body returns a reader of the call's body from its start, and whether it has one.
func (c *Call) body() (io.Reader, bool) {
	if c.Body == nil {
		return nil, false
	}
	total := int64(binary.LittleEndian.Uint32(c.Frame[8:12])) + protocol.HeaderSize
	return io.NewSectionReader(c.Body, 0, total-int64(len(c.Frame))), true
}

// Outcome is what became of one Call. The worker says it (docs/protocol.md): an answer ends
// with a frame without MORE, a request with DONE, and DONE with LAST means the worker read no
// request after that one (or after the one its payload names). The pool never has to infer it;
// rules.go holds these rules, and the Exchange applies them at every concurrency.
//
//	call      what the worker said                                outcome
//	written   its answer's last frame                             Answered (the client has it)
//	written   nothing, then DONE+LAST for an earlier request       Unread   (it may run elsewhere)
//	written   nothing, then DONE+LAST naming it read, or for it    Failed   (for it: ErrFatal, 500)
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

// PoisonByte is what a poison build writes over released buffers (poison_off.go).
const PoisonByte = 0xDB
