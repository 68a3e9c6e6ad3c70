package websocket

import (
	"context"
	"encoding/binary"
	"fmt"
)

// Broker carries messages between the servers that share it (websocket.broker): publishes to
// every server, sends and closes to the server that holds the connection. Delivery is at most
// once: pub/sub keeps nothing for a server that is not listening.
type Broker interface {
	// Publish sends m to the server named node, or to every server (this one included) when
	// node is empty.
	Publish(ctx context.Context, node string, m *Message) error
	// Subscribe starts delivering to deliver what is sent to every server and to node, until
	// Close; it returns once the subscription is in place (ctx bounds that). deliver must not
	// block for long.
	Subscribe(ctx context.Context, node string, deliver func(*Message)) error
	Close() error
}

// MsgOp says what a broker message asks.
type MsgOp uint8

// The operations a broker carries.
const (
	MsgPublish MsgOp = 1 // Target is the channel
	MsgSend    MsgOp = 2 // Target is the connection id
	MsgClose   MsgOp = 3 // Target is the connection id, Data the reason
)

// Message is what one server tells another through the broker:
//
//	u8 op | u8 flags (bit 0: binary) | u16 code | u32 target length | u32 event id length |
//	target | event id | data (the rest)
type Message struct {
	Op     MsgOp
	Binary bool
	Code   uint16
	Target string
	// EventID is a publish's id in the broker's history (a Redis Streams entry id), which every
	// server gives its event-stream subscribers; empty where the broker keeps none.
	EventID string
	Data    []byte
}

// History is a Broker that keeps what was published, so that an event stream resumes
// (Last-Event-ID) on any server of the broker.
type History interface {
	// Since returns what was published to channels after the event id, oldest first, at most
	// HistoryMessages a channel and none older than HistoryAge. An id the broker cannot read
	// returns nothing.
	Since(ctx context.Context, channels []string, after string) ([]Kept, error)
}

// Kept is one publish from a broker's history.
type Kept struct {
	Channel, EventID string
	Data             []byte
}

// AppendMessage appends m's encoding to dst.
func AppendMessage(dst []byte, m *Message) []byte {
	var flags byte
	if m.Binary {
		flags = 1
	}
	dst = append(dst, byte(m.Op), flags)
	dst = binary.LittleEndian.AppendUint16(dst, m.Code)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(m.Target)))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(m.EventID)))
	dst = append(dst, m.Target...)
	dst = append(dst, m.EventID...)
	return append(dst, m.Data...)
}

// DecodeMessage decodes a broker message; Data aliases b.
func DecodeMessage(b []byte) (Message, error) {
	if len(b) < 12 {
		return Message{}, fmt.Errorf("%w: a broker message of %d bytes", ErrMalformed, len(b))
	}
	m := Message{Op: MsgOp(b[0]), Binary: b[1]&1 != 0, Code: binary.LittleEndian.Uint16(b[2:])}
	if m.Op < MsgPublish || m.Op > MsgClose || b[1]&^1 != 0 {
		return Message{}, fmt.Errorf("%w: broker op %d flags %d", ErrMalformed, b[0], b[1])
	}
	n := uint64(binary.LittleEndian.Uint32(b[4:]))
	e := uint64(binary.LittleEndian.Uint32(b[8:]))
	if n+e > uint64(len(b)-12) {
		return Message{}, fmt.Errorf("%w: broker target past the end", ErrMalformed)
	}
	m.Target = string(b[12 : 12+n])
	m.EventID = string(b[12+n : 12+n+e])
	m.Data = b[12+n+e:]
	return m, nil
}
