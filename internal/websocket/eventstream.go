package websocket

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	gorilla "github.com/gorilla/websocket"

	"github.com/peregrinephp/peregrine/internal/protocol"
)

// An event-stream subscriber is an HTTP response that PHP turned into a subscription
// (Peregrine\Http\EventStream::subscribe): a 200 whose headers name its channels. The hub
// keeps the response open and writes each message published to those channels as a
// server-sent event, from the request's own goroutine (a ResponseWriter is not shared).
const (
	streamHeader = "X-Peregrine-Event-Stream"  // one per channel
	resumeHeader = "X-Peregrine-Last-Event-Id" // where to resume, if PHP said
)

// sseStream is the writing end of an event-stream subscriber.
type sseStream struct {
	wake chan struct{} // something was queued
	// replayed holds the event ids replayed from the broker's history: a live event among
	// them was kept before the replay and heard after it, and is not sent twice. A set, not
	// the last id: the replay reads each channel apart, so a live event below the last
	// replayed id may be one the replay missed. Written before the stream's loop starts.
	replayed map[string]struct{}
}

// EventStream takes over an answer that subscribes (status 200 with X-Peregrine-Event-Stream
// headers) and returns true once the stream ended; false leaves the answer to the caller.
func (h *Hub) EventStream(w http.ResponseWriter, r *http.Request, status int, headers []protocol.Field) bool {
	if status != http.StatusOK {
		return false
	}
	var channels []string
	last := ""
	for _, f := range headers {
		switch {
		case strings.EqualFold(f.Name, streamHeader):
			channels = append(channels, f.Value)
		case strings.EqualFold(f.Name, resumeHeader):
			last = f.Value
		}
	}
	if len(channels) == 0 {
		return false
	}
	c := &conn{h: h, id: h.newID(), sse: &sseStream{wake: make(chan struct{}, 1)}, open: true}
	c.base.Path, c.base.RemoteAddr = r.URL.Path, r.RemoteAddr
	if err := h.add(c); err != nil {
		h.refuse(w, err)
		return true
	}
	defer h.remove(c)
	w = hijacker(w) // under compression: events go out as they are, each flushed
	hd := w.Header()
	for _, f := range headers {
		if !strings.EqualFold(f.Name, streamHeader) && !strings.EqualFold(f.Name, resumeHeader) {
			hd.Add(f.Name, f.Value)
		}
	}
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no")
	hd.Del("Content-Length")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	// A member before the client sees the answer: a publish it makes after that reaches it.
	h.subscribe(c, channels, last)
	if rc.Flush() != nil {
		return true
	}
	h.stats.opened.Add(1)

	keepalive := time.NewTicker(h.opts.PingInterval)
	defer keepalive.Stop()
	var buf bytes.Buffer
	for {
		select {
		case <-c.sse.wake:
		case <-keepalive.C:
			buf.WriteString(":\n\n") // a comment: finds a client that left
		case <-r.Context().Done():
			return true
		case <-h.ctx.Done():
			return true
		}
		c.mu.Lock()
		queue := c.queue
		c.queue, c.queued = nil, 0
		stop := c.closeCode != 0 || c.done
		c.mu.Unlock()
		for _, o := range queue {
			if o.typ == gorilla.CloseMessage || o.typ == gorilla.PingMessage {
				continue // a WebSocket's control frames: the stream just ends (stop)
			}
			if _, dup := c.sse.replayed[o.eventID]; dup && o.prepared != nil {
				continue // a live publish the replay had already
			}
			appendEvent(&buf, o)
			c.h.stats.messagesOut.Add(1)
		}
		if buf.Len() > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout))
			if _, err := w.Write(buf.Bytes()); err != nil || rc.Flush() != nil {
				return true
			}
			buf.Reset()
		}
		if stop {
			return true
		}
	}
}

// appendEvent writes one message as a server-sent event: its id, then a data line per line.
func appendEvent(buf *bytes.Buffer, o outgoing) {
	if o.eventID != "" {
		buf.WriteString("id: " + o.eventID + "\n")
	}
	for line := range strings.SplitSeq(string(o.data), "\n") {
		buf.WriteString("data: ")
		buf.WriteString(strings.TrimSuffix(line, "\r"))
		buf.WriteByte('\n')
	}
	buf.WriteByte('\n')
}

// subscribe joins c to channels and queues what it missed since last, so that no publish
// falls between the replay and the live messages.
func (h *Hub) subscribe(c *conn, channels []string, last string) {
	hi, broker := h.opts.Broker.(History)
	if last != "" && broker {
		h.subscribeFrom(c, hi, channels, last)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ch := range channels {
		h.joinLocked(c, ch)
	}
	if last == "" {
		return
	}
	node, seqText, ok := strings.Cut(last, "-")
	if !ok || node != h.node {
		return // another server's id: resuming needs this server's history
	}
	after, err := strconv.ParseUint(seqText, 10, 64)
	if err != nil {
		return
	}
	for _, e := range h.history.since(after, time.Now()) {
		if _, ok := c.channels[e.channel]; ok {
			c.enqueue(outgoing{data: e.data, eventID: h.eventID(e.seq)})
		}
	}
}

// subscribeFrom resumes from the broker's history. It joins first, so that live publishes
// queue from then on, then reads the history without the hub's lock (the broker may take
// seconds to answer, and every send, delivery and upgrade takes that lock), and puts the
// replay ahead of what queued meanwhile, dropping the live publishes the replay had.
func (h *Hub) subscribeFrom(c *conn, hi History, channels []string, last string) {
	h.mu.Lock()
	for _, ch := range channels {
		h.joinLocked(c, ch)
	}
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(h.ctx, 2*time.Second) // a Redis call may hang
	defer cancel()
	kept, err := hi.Since(ctx, channels, last)
	if err != nil {
		h.log.Warn("an event stream could not resume", "last_event_id", last, "err", err)
	}
	if len(kept) == 0 {
		return
	}
	c.sse.replayed = make(map[string]struct{}, len(kept))
	queue := make([]outgoing, 0, len(kept))
	for _, k := range kept {
		c.sse.replayed[k.EventID] = struct{}{}
		queue = append(queue, outgoing{data: k.Data, eventID: k.EventID})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || c.closeCode != 0 {
		return
	}
	for _, o := range c.queue {
		if _, dup := c.sse.replayed[o.eventID]; !dup || o.prepared == nil {
			queue = append(queue, o)
		}
	}
	// As enqueue does: what fits the send queue is sent, then the stream ends.
	c.queue, c.queued = queue, 0
	for i, o := range queue {
		if c.queued+int64(len(o.data)) > c.h.opts.SendQueue {
			c.queue = queue[:i]
			c.closeCode, c.closeReason = gorilla.ClosePolicyViolation, "send queue full"
			break
		}
		c.queued += int64(len(o.data))
	}
	c.startWriterLocked()
}

func (h *Hub) eventID(seq uint64) string { return h.node + "-" + strconv.FormatUint(seq, 10) }

// History bounds: what an event stream can resume from (Last-Event-ID) on this server.
const (
	HistoryMessages = 1024
	HistoryBytes    = 8 << 20
	HistoryAge      = 5 * time.Minute
)

// history keeps the last publishes delivered here, for Last-Event-ID.
type history struct {
	mu      sync.Mutex
	seq     uint64
	entries []histEntry
	bytes   int
}

type histEntry struct {
	seq     uint64
	channel string
	data    []byte
	at      time.Time
}

// add remembers a publish and returns its sequence number.
func (hi *history) add(channel string, data []byte, now time.Time) uint64 {
	hi.mu.Lock()
	defer hi.mu.Unlock()
	hi.seq++
	hi.entries = append(hi.entries, histEntry{seq: hi.seq, channel: channel, data: data, at: now})
	hi.bytes += len(data)
	drop := 0
	for drop < len(hi.entries) && (len(hi.entries)-drop > HistoryMessages || hi.bytes > HistoryBytes || now.Sub(hi.entries[drop].at) > HistoryAge) {
		hi.bytes -= len(hi.entries[drop].data)
		drop++
	}
	if drop > 0 {
		hi.entries = append(hi.entries[:0:0], hi.entries[drop:]...)
	}
	return hi.seq
}

// since returns the entries after seq that are younger than HistoryAge.
func (hi *history) since(seq uint64, now time.Time) []histEntry {
	hi.mu.Lock()
	defer hi.mu.Unlock()
	var out []histEntry
	for _, e := range hi.entries {
		if e.seq > seq && now.Sub(e.at) <= HistoryAge {
			out = append(out, e)
		}
	}
	return out
}
