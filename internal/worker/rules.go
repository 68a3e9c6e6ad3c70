package worker

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/peregrinephp/peregrine/internal/protocol"
)

// The outcome rules (docs/protocol.md, the tables of "The conversation" and "Concurrent
// requests") live here, once, for the one Exchange, whether its worker reads one request at a
// time (Exec) or as they come (Do). What became of a request depends only on its
// id, whether its answer was complete, and the id of the last request the worker read:
//
//	answer complete                  Answered  (whatever the worker did after)
//	id above the last request read   Unread    (PHP never saw it: it may run on another worker)
//	otherwise                        Failed    (PHP may have begun it: it never runs again)
//
// "The last request read" is what the worker's last word says (lastRead), or, when it died
// without one, every request it was written that it could have read: at concurrency 1 the one
// whose answer or DONE was awaited (the worker reads the next only after that DONE); above 1
// every request in flight.

// outcome applies the rules to the request with the given id.
func outcome(id uint32, answered bool, lastRead uint32) Outcome {
	switch {
	case answered:
		return Answered
	case id > lastRead:
		return Unread
	default:
		return Failed
	}
}

// allRead is the last request read of a concurrent worker that died without a last word, or
// whose last word named none: every request in flight may have been begun.
const allRead = math.MaxUint32

// lastRead is the id of the last request a worker read, from its last word (a DONE frame with
// LAST): its 4-byte payload when present; without one, at concurrency 1 the DONE's own id (a
// sequential worker reads no request after the last it ended), above 1 unknown (allRead).
func lastRead(h protocol.Header, payload []byte, sequential bool) (uint32, error) {
	switch {
	case len(payload) == 4:
		return binary.LittleEndian.Uint32(payload), nil
	case len(payload) != 0:
		return 0, fmt.Errorf("%w: a DONE with a %d-byte payload", ErrProtocol, len(payload))
	case sequential:
		return h.ID, nil
	default:
		return allRead, nil
	}
}
