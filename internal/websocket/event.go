package websocket

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Kind says which event of a connection a REQUEST carries to PHP.
type Kind uint8

// The events of a connection, in the order PHP sees them: one open, any messages, one close.
const (
	KindOpen    Kind = 1
	KindMessage Kind = 2
	KindClose   Kind = 3
)

// Event is what PHP is told about one connection (docs/websocket.md, "Events on the wire"). It
// travels as the body of a REQUEST frame with method WEBSOCKET:
//
//	u8 kind | u8 flags (bit 0: binary) | u16 close code | u32 id length | u32 attributes length |
//	u32 reason length | key (32 bytes) | id | attributes (JSON) | reason | data (the rest)
//
// Integers are little-endian. The key is the server's secret (PEREGRINE_WEBSOCKET_KEY in every
// worker's environment): a client can send a WEBSOCKET request too, but without the key PHP
// treats it as an ordinary request, so nobody can forge an event or its attributes.
type Event struct {
	Kind       Kind
	Binary     bool
	Key        string // KeyLen bytes
	Code       uint16 // KindClose
	ID         string
	Attributes []byte // a JSON object, or empty for none yet
	Reason     string // KindClose
	Data       []byte // KindMessage
}

const eventHead = 16

// KeyLen is the length of the server's secret in every event.
const KeyLen = 32

// ErrMalformed is the error of an event or answer payload that cannot be decoded.
var ErrMalformed = errors.New("websocket: malformed payload")

// AppendEvent appends e's encoding to dst.
func AppendEvent(dst []byte, e *Event) []byte {
	var flags byte
	if e.Binary {
		flags = 1
	}
	dst = append(dst, byte(e.Kind), flags)
	dst = binary.LittleEndian.AppendUint16(dst, e.Code)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(e.ID)))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(e.Attributes)))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(e.Reason)))
	var key [KeyLen]byte
	copy(key[:], e.Key)
	dst = append(dst, key[:]...)
	dst = append(dst, e.ID...)
	dst = append(dst, e.Attributes...)
	dst = append(dst, e.Reason...)
	return append(dst, e.Data...)
}

// DecodeEvent decodes an event payload; the result's slices alias b.
func DecodeEvent(b []byte) (Event, error) {
	if len(b) < eventHead+KeyLen {
		return Event{}, fmt.Errorf("%w: an event of %d bytes", ErrMalformed, len(b))
	}
	e := Event{Kind: Kind(b[0]), Binary: b[1]&1 != 0, Code: binary.LittleEndian.Uint16(b[2:])}
	if e.Kind < KindOpen || e.Kind > KindClose || b[1]&^1 != 0 {
		return Event{}, fmt.Errorf("%w: event kind %d flags %d", ErrMalformed, b[0], b[1])
	}
	idLen := uint64(binary.LittleEndian.Uint32(b[4:]))
	attrLen := uint64(binary.LittleEndian.Uint32(b[8:]))
	reasonLen := uint64(binary.LittleEndian.Uint32(b[12:]))
	e.Key = string(b[eventHead : eventHead+KeyLen])
	rest := b[eventHead+KeyLen:]
	if idLen+attrLen+reasonLen > uint64(len(rest)) {
		return Event{}, fmt.Errorf("%w: lengths past the end", ErrMalformed)
	}
	e.ID = string(rest[:idLen])
	rest = rest[idLen:]
	e.Attributes = rest[:attrLen:attrLen]
	rest = rest[attrLen:]
	e.Reason = string(rest[:reasonLen])
	e.Data = rest[reasonLen:]
	return e, nil
}

// Op is one thing PHP asked of its connection while handling an event.
type Op uint8

// The actions of an answer, applied in order once the handler returned.
const (
	OpSend  Op = 1 // Data, Binary
	OpClose Op = 2 // Code, Data is the reason
	OpJoin  Op = 3 // Data is the channel
	OpLeave Op = 4 // Data is the channel
)

// Action is one call of Connection::send, close, join or leave.
type Action struct {
	Op     Op
	Binary bool
	Code   uint16
	Data   []byte
}

// Reply is what PHP answers to an event, the body of a RESPONSE with status 101 (an open that
// is accepted) or 200:
//
//	u8 flags (bit 0: the attributes changed) | u32 attributes length | attributes (JSON) |
//	actions, each: u8 op | u8 flags (bit 0: binary) | u16 code | u32 length | data
type Reply struct {
	AttributesSet bool
	Attributes    []byte
	Actions       []Action
}

// AppendReply appends r's encoding to dst (the Go side only needs it for tests and fuzzing;
// PHP writes replies).
func AppendReply(dst []byte, r *Reply) []byte {
	var flags byte
	if r.AttributesSet {
		flags = 1
	}
	dst = append(dst, flags)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Attributes)))
	dst = append(dst, r.Attributes...)
	for _, a := range r.Actions {
		var f byte
		if a.Binary {
			f = 1
		}
		dst = append(dst, byte(a.Op), f)
		dst = binary.LittleEndian.AppendUint16(dst, a.Code)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(a.Data)))
		dst = append(dst, a.Data...)
	}
	return dst
}

// DecodeReply decodes a reply payload; the result's slices alias b. An empty payload is a reply
// that changes nothing.
func DecodeReply(b []byte) (Reply, error) {
	var r Reply
	if len(b) == 0 {
		return r, nil
	}
	if len(b) < 5 || b[0]&^1 != 0 {
		return r, fmt.Errorf("%w: a reply of %d bytes", ErrMalformed, len(b))
	}
	r.AttributesSet = b[0]&1 != 0
	n := uint64(binary.LittleEndian.Uint32(b[1:]))
	b = b[5:]
	if n > uint64(len(b)) {
		return Reply{}, fmt.Errorf("%w: attributes past the end", ErrMalformed)
	}
	r.Attributes, b = b[:n:n], b[n:]
	for len(b) > 0 {
		if len(b) < 8 {
			return Reply{}, fmt.Errorf("%w: an action cut short", ErrMalformed)
		}
		a := Action{Op: Op(b[0]), Binary: b[1]&1 != 0, Code: binary.LittleEndian.Uint16(b[2:])}
		if a.Op < OpSend || a.Op > OpLeave || b[1]&^1 != 0 {
			return Reply{}, fmt.Errorf("%w: action %d flags %d", ErrMalformed, b[0], b[1])
		}
		n := uint64(binary.LittleEndian.Uint32(b[4:]))
		b = b[8:]
		if n > uint64(len(b)) {
			return Reply{}, fmt.Errorf("%w: action data past the end", ErrMalformed)
		}
		a.Data, b = b[:n:n], b[n:]
		r.Actions = append(r.Actions, a)
	}
	return r, nil
}
