package websocket

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	gorilla "github.com/gorilla/websocket"

	"github.com/peregrinephp/peregrine/internal/protocol"
	"github.com/peregrinephp/peregrine/internal/worker"
)

// conn is one WebSocket connection. Its events reach PHP from one goroutine (the upgrade's,
// then read's), so they go one at a time and in order; attrs belong to that goroutine. What
// is sent goes through queue to one writer goroutine, started when there is something to
// write and ended when the queue is empty, so an idle connection costs one goroutine.
type conn struct {
	h    *Hub
	id   string
	base protocol.Request // the upgrade's fields, for the head of every event
	ws   *gorilla.Conn    // set when the upgrade succeeded, before open
	sse  *sseStream       // an event-stream subscriber instead (eventstream.go)

	attrs []byte // the attributes PHP last set, a JSON object

	mu          sync.Mutex
	open        bool // upgraded: the writer may run
	writing     bool // the writer goroutine runs
	done        bool // the socket is closed
	queue       []outgoing
	queued      int64  // bytes in queue
	closeCode   int    // the server closes it with this code; 0 until then
	closeReason string // with closeCode
	closeSent   atomic.Bool
	pinger      *time.Timer

	channels map[string]struct{} // guarded by h.mu
}

// outgoing is one message waiting to be written.
type outgoing struct {
	typ      int // gorilla.TextMessage, BinaryMessage, CloseMessage or PingMessage
	data     []byte
	prepared *gorilla.PreparedMessage // a publish: framed once for all its connections
	eventID  string                   // a publish: its id, for event streams
}

// closeWait is how long the server waits for the client's answer to its close frame.
const closeWait = 2 * time.Second

// enqueue queues o for the writer. Past the send queue's limit the connection is closed with
// 1008 at once: the client does not read, and nothing waits for it.
func (c *conn) enqueue(o outgoing) {
	n := int64(len(o.data))
	c.mu.Lock()
	if c.done || c.closeCode != 0 {
		c.mu.Unlock()
		return // closing: what comes after the close is not sent
	}
	if c.queued+n > c.h.opts.SendQueue {
		c.closeCode, c.closeReason = gorilla.ClosePolicyViolation, "send queue full"
		open := c.open
		if c.sse != nil {
			c.startWriterLocked() // its loop sees the close
		}
		c.mu.Unlock()
		if open && c.sse == nil {
			go c.abortWith(gorilla.ClosePolicyViolation, "send queue full")
		}
		return
	}
	c.queue = append(c.queue, o)
	c.queued += n
	c.startWriterLocked()
	c.mu.Unlock()
}

// close starts the closing handshake with code; once open, the close frame follows what is
// queued.
func (c *conn) close(code int, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || c.closeCode != 0 {
		return
	}
	c.closeCode, c.closeReason = code, reason
	if c.open {
		c.queue = append(c.queue, outgoing{typ: gorilla.CloseMessage, data: gorilla.FormatCloseMessage(code, reason)})
		c.startWriterLocked()
	}
}

func (c *conn) startWriterLocked() {
	if c.sse != nil { // its request's goroutine writes
		select {
		case c.sse.wake <- struct{}{}:
		default:
		}
		return
	}
	if c.writing || !c.open || c.done || len(c.queue) == 0 {
		return
	}
	c.writing = true
	c.h.wg.Add(1)
	go c.write()
}

// write sends the queue until it is empty.
func (c *conn) write() {
	defer c.h.wg.Done()
	for {
		c.mu.Lock()
		if len(c.queue) == 0 || c.done {
			c.writing = false
			c.queue = nil
			c.mu.Unlock()
			return
		}
		o := c.queue[0]
		c.queue[0] = outgoing{}
		c.queue = c.queue[1:]
		c.queued -= int64(len(o.data))
		c.mu.Unlock()
		deadline := time.Now().Add(c.h.opts.WriteTimeout)
		var err error
		switch {
		case o.prepared != nil:
			_ = c.ws.SetWriteDeadline(deadline)
			err = c.ws.WritePreparedMessage(o.prepared)
		case o.typ == gorilla.CloseMessage || o.typ == gorilla.PingMessage:
			err = c.ws.WriteControl(o.typ, o.data, deadline)
		default:
			_ = c.ws.SetWriteDeadline(deadline)
			err = c.ws.WriteMessage(o.typ, o.data)
		}
		if err != nil {
			c.mu.Lock()
			c.writing = false
			c.mu.Unlock()
			c.abort()
			return
		}
		switch o.typ {
		case gorilla.CloseMessage:
			c.closeSent.Store(true)
			_ = c.ws.SetReadDeadline(time.Now().Add(closeWait))
		case gorilla.PingMessage:
		default:
			c.h.stats.messagesOut.Add(1)
		}
	}
}

// abortWith tries to say why in a close frame, briefly, then drops the connection: for a
// client that does not read, whose writer may be stuck.
func (c *conn) abortWith(code int, reason string) {
	_ = c.ws.WriteControl(gorilla.CloseMessage, gorilla.FormatCloseMessage(code, reason), time.Now().Add(100*time.Millisecond))
	c.abort()
}

// abort closes the socket; the reading loop then ends the connection.
func (c *conn) abort() {
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return
	}
	c.done = true
	c.queue = nil
	ws := c.ws
	c.mu.Unlock()
	if ws != nil {
		_ = ws.NetConn().Close()
	}
}

// ping queues a ping and arms the next.
func (c *conn) ping() {
	c.mu.Lock()
	if c.done || c.closeCode != 0 { // closing: the close frame is the last to go
		c.mu.Unlock()
		return
	}
	c.queue = append(c.queue, outgoing{typ: gorilla.PingMessage})
	c.startWriterLocked()
	c.pinger.Reset(c.h.opts.PingInterval)
	c.mu.Unlock()
}

// keepReading gives the peer silence more to send, unless the close frame went out: then the
// writer's shorter wait for the peer's reply (closeWait) stands, even if it set it between the
// look and the reader's own deadline (the look again after).
func (c *conn) keepReading(silence time.Duration) {
	if c.closeSent.Load() {
		return
	}
	_ = c.ws.SetReadDeadline(time.Now().Add(silence))
	if c.closeSent.Load() {
		_ = c.ws.SetReadDeadline(time.Now().Add(closeWait))
	}
}

// read is the connection's loop once open: each message becomes an onMessage event, and the
// loop reads the next one only after PHP has handled it. It ends with onClose.
func (c *conn) read() {
	defer c.h.wg.Done()
	ws := c.ws
	ws.SetReadLimit(c.h.opts.MaxMessageSize)
	silence := 2 * c.h.opts.PingInterval
	ws.SetPongHandler(func(string) error {
		c.keepReading(silence)
		return nil
	})
	code, reason := gorilla.CloseAbnormalClosure, ""
	for {
		c.keepReading(silence)
		typ, data, err := ws.ReadMessage()
		if err != nil {
			code, reason = closeOf(err)
			break
		}
		if typ == gorilla.TextMessage && !utf8.Valid(data) {
			// gorilla does not check; RFC 6455 8.1: a text message that is not UTF-8 MUST
			// fail the connection, and PHP takes a text message for a string of UTF-8.
			code, reason = gorilla.CloseInvalidFramePayloadData, "text message not UTF-8"
			c.abortWith(code, reason)
			break
		}
		c.h.stats.messagesIn.Add(1)
		c.mu.Lock()
		closing := c.closeCode != 0
		c.mu.Unlock()
		if closing {
			continue // what the client sent after the server began closing goes nowhere
		}
		c.message(typ == gorilla.BinaryMessage, data)
	}
	c.mu.Lock()
	if c.closeCode != 0 {
		code, reason = c.closeCode, c.closeReason // the server's, whatever the client answered
	}
	c.mu.Unlock()
	c.abort()
	c.end(code, reason)
}

// closeOf returns the close code and reason a read error stands for.
func closeOf(err error) (int, string) {
	var ce *gorilla.CloseError
	switch {
	case errors.As(err, &ce):
		return ce.Code, ce.Text
	case errors.Is(err, gorilla.ErrReadLimit):
		return gorilla.CloseMessageTooBig, "message too big"
	}
	// gorilla hides the error chain of a timeout, not its kind.
	ne, isNet := errors.AsType[net.Error](err)
	if isNet && ne.Timeout() {
		return gorilla.CloseAbnormalClosure, "no answer to pings"
	}
	// A frame that breaks the protocol: gorilla sent the client 1002 with what was wrong, and
	// returns that text after "websocket: " (handleProtocolError), with no type to tell it by.
	// The client was told 1002, so PHP is too, not 1006.
	if what, ok := strings.CutPrefix(err.Error(), "websocket: "); ok && !isNet {
		return gorilla.CloseProtocolError, what
	}
	return gorilla.CloseAbnormalClosure, ""
}

// message hands one message to PHP and applies the reply. A handler that threw (a 500), an
// event that PHP could not run (no worker, exec_timeout, a crash) or a malformed reply closes
// this connection with 1011.
func (c *conn) message(binary bool, data []byte) {
	a, err := c.event(c.h.ctx, &Event{Kind: KindMessage, Binary: binary, Data: data}, nil)
	status := 0
	if err == nil {
		status = a.status
	}
	if err == nil && status == 200 {
		var r Reply
		if r, err = DecodeReply(a.body); err == nil {
			c.apply(&r)
			return
		}
	}
	if err != nil {
		c.h.log.Warn("a WebSocket message could not be handled: closing its connection (1011)", "id", c.id, "err", err)
	} else {
		c.h.log.Debug("onMessage failed: closing its connection (1011)", "id", c.id, "status", status)
	}
	c.close(gorilla.CloseInternalServerErr, "")
}

// end forgets the connection and tells PHP (onClose). Called once, by the loop that owned it.
func (c *conn) end(code int, reason string) {
	c.mu.Lock()
	if c.pinger != nil {
		c.pinger.Stop()
	}
	c.mu.Unlock()
	c.h.remove(c)
	c.h.stats.closed(code)
	if _, err := c.event(c.h.ctx, &Event{Kind: KindClose, Code: uint16(code), Reason: reason}, nil); err != nil && c.h.ctx.Err() == nil {
		c.h.log.Warn("onClose could not run", "id", c.id, "err", err)
	}
}

// apply carries out a reply's actions in order.
func (c *conn) apply(r *Reply) {
	if r.AttributesSet {
		c.attrs = r.Attributes
	}
	for _, a := range r.Actions {
		switch a.Op {
		case OpSend:
			typ := gorilla.TextMessage
			if a.Binary {
				typ = gorilla.BinaryMessage
			}
			c.enqueue(outgoing{typ: typ, data: a.Data})
		case OpClose:
			code, reason := int(a.Code), string(a.Data)
			if code == 0 || !SendableCode(code) {
				code = gorilla.CloseNormalClosure
			}
			if len(reason) > 123 {
				reason = reason[:123]
			}
			c.close(code, reason)
		case OpJoin:
			c.h.join(c, string(a.Data))
		case OpLeave:
			c.h.leave(c, string(a.Data))
		}
	}
}

// maxReply bounds what PHP may answer to one event.
const maxReply = 64 << 20

// event runs one event in PHP and returns its answer. head, if set, is the upgrade's request
// (onOpen); other events carry only its fixed fields.
func (c *conn) event(ctx context.Context, e *Event, head *protocol.Request) (*collector, error) {
	e.ID, e.Key = c.id, c.h.key
	if e.Kind != KindOpen {
		e.Attributes = c.attrs
	}
	req := c.base
	if head != nil {
		req = *head
	}
	req.Method = "WEBSOCKET"
	req.Body = AppendEvent(make([]byte, 0, eventHead+KeyLen+len(c.id)+len(e.Attributes)+len(e.Reason)+len(e.Data)), e)
	req.Headers = append(req.Headers[:len(req.Headers):len(req.Headers)],
		protocol.Field{Name: "content-length", Value: strconv.Itoa(len(req.Body))})
	frame, err := protocol.AppendRequest(nil, 0, &req)
	if err != nil {
		return nil, fmt.Errorf("websocket: event for PHP: %w", err)
	}
	a := &collector{}
	_, err = c.h.run.Do(ctx, &worker.Call{Frame: frame, Answer: a})
	if workerEnded(err) && a.status == 0 {
		// Its worker died (a kill, a crash, a worker killed while idle before the pool saw
		// it, another event's fatal error or exit() under concurrency): once more on another,
		// so that losing workers loses no connection. An event whose worker died while
		// running it may so run twice (docs/websocket.md).
		a = &collector{}
		_, err = c.h.run.Do(ctx, &worker.Call{Frame: frame, Answer: a})
	}
	if err != nil {
		return nil, err
	}
	return a, a.err
}

// workerEnded reports whether an event failed because its worker ended under it, not because
// of the event itself: the process died, or it exits because another request on it hit a fatal
// error (ErrExiting without ErrFatal; ErrFatal is this event's own).
func workerEnded(err error) bool {
	return errors.Is(err, worker.ErrExited) ||
		errors.Is(err, worker.ErrExiting) && !errors.Is(err, worker.ErrFatal)
}

// collector gathers an answer's status and body.
type collector struct {
	status int
	head   []protocol.Field
	body   []byte
	err    error
}

func (a *collector) Frame(t protocol.Type, _ uint16, payload []byte) error {
	switch t {
	case protocol.TypeResponse:
		r, err := protocol.DecodeResponse(payload)
		if err != nil {
			return err
		}
		a.status = r.Status
		a.head = r.Headers
		a.body = append([]byte(nil), r.Body...)
	case protocol.TypeBody:
		if len(a.body)+len(payload) > maxReply {
			a.err = fmt.Errorf("websocket: PHP answered an event with more than %d bytes", maxReply)
			return nil
		}
		a.body = append(a.body, payload...)
	}
	return nil
}
