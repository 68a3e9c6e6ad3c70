package websocket

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	gorilla "github.com/gorilla/websocket"
)

// join adds c to channel here. Channels live on each server: with a broker every server
// hears every publish and delivers it to its own members.
func (h *Hub) join(c *conn, channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.joinLocked(c, channel)
}

func (h *Hub) joinLocked(c *conn, channel string) {
	if _, ok := h.conns[c.id]; !ok {
		return // gone already
	}
	if c.channels == nil {
		c.channels = map[string]struct{}{}
	}
	c.channels[channel] = struct{}{}
	m := h.channels[channel]
	if m == nil {
		m = map[*conn]struct{}{}
		h.channels[channel] = m
	}
	m[c] = struct{}{}
}

func (h *Hub) leave(c *conn, channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leaveLocked(c, channel)
}

func (h *Hub) leaveLocked(c *conn, channel string) {
	delete(c.channels, channel)
	if m := h.channels[channel]; m != nil {
		delete(m, c)
		if len(m) == 0 {
			delete(h.channels, channel)
		}
	}
}

// Publish sends data to every connection that joined channel, here and, with a broker, on
// every server of the broker. Delivery is at most once: a server that is down or a client
// whose send queue is full misses it.
func (h *Hub) Publish(ctx context.Context, channel string, data []byte) error {
	start := time.Now()
	defer func() { h.stats.published(time.Since(start)) }()
	if h.opts.Broker != nil {
		return h.opts.Broker.Publish(ctx, "", &Message{Op: MsgPublish, Target: channel, Data: data})
	}
	h.deliver(channel, data, "")
	return nil
}

// deliver queues data for the members of channel here. eventID is its id in the broker's
// history; without one, this server's history keeps it and names it.
func (h *Hub) deliver(channel string, data []byte, eventID string) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	// One publish at a time: every member, and the history, see them in one order.
	h.deliverMu.Lock()
	defer h.deliverMu.Unlock()
	if eventID == "" {
		eventID = h.eventID(h.history.add(channel, data, time.Now()))
	}
	members := h.channels[channel]
	if len(members) == 0 {
		return
	}
	typ := gorilla.TextMessage
	if !utf8.Valid(data) {
		typ = gorilla.BinaryMessage // a text frame must be UTF-8, or the client closes
	}
	pm, err := gorilla.NewPreparedMessage(typ, data)
	if err != nil {
		return
	}
	for c := range members {
		c.enqueue(outgoing{typ: typ, data: data, prepared: pm, eventID: eventID})
	}
}

// Send sends data to the connection id, wherever it is held. A connection that is gone (or
// unknown) is no error: it may have closed just before, and the sender cannot know.
func (h *Hub) Send(ctx context.Context, id string, data []byte, binary bool) error {
	if node := nodeOf(id); node != h.node && h.opts.Broker != nil {
		return h.opts.Broker.Publish(ctx, node, &Message{Op: MsgSend, Target: id, Data: data, Binary: binary})
	}
	h.sendHere(id, data, binary)
	return nil
}

func (h *Hub) sendHere(id string, data []byte, binary bool) {
	if c := h.lookup(id); c != nil {
		typ := gorilla.TextMessage
		if binary {
			typ = gorilla.BinaryMessage
		}
		c.enqueue(outgoing{typ: typ, data: data})
	}
}

// ErrCloseCode is the error of a close code a server may not send.
var ErrCloseCode = errors.New("websocket: not a close code a server may send (1000-1003, 1007-1011, 3000-4999)")

// SendableCode reports whether a server may send code in a close frame (RFC 6455 7.4).
func SendableCode(code int) bool {
	return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1011) || (code >= 3000 && code <= 4999)
}

// CloseConnection closes the connection id, wherever it is held, with code (1000 when 0).
func (h *Hub) CloseConnection(ctx context.Context, id string, code int, reason string) error {
	if code == 0 {
		code = gorilla.CloseNormalClosure
	}
	if !SendableCode(code) {
		return fmt.Errorf("%w: %d", ErrCloseCode, code)
	}
	if len(reason) > 123 {
		reason = reason[:123] // what a control frame's 125 bytes leave
	}
	if node := nodeOf(id); node != h.node && h.opts.Broker != nil {
		return h.opts.Broker.Publish(ctx, node, &Message{Op: MsgClose, Target: id, Code: uint16(code), Data: []byte(reason)})
	}
	if c := h.lookup(id); c != nil {
		c.close(code, reason)
	}
	return nil
}

// fromBroker delivers what another server (or this one, through the broker) sent.
func (h *Hub) fromBroker(m *Message) {
	switch m.Op {
	case MsgPublish:
		h.deliver(m.Target, m.Data, m.EventID)
	case MsgSend:
		h.sendHere(m.Target, m.Data, m.Binary)
	case MsgClose:
		if c := h.lookup(m.Target); c != nil {
			code, reason := int(m.Code), string(m.Data)
			if !SendableCode(code) { // CloseConnection checked it; a foreign message may not have
				code = gorilla.CloseNormalClosure
			}
			if len(reason) > 123 {
				reason = reason[:123]
			}
			c.close(code, reason)
		}
	}
}
