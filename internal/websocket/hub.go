// Package websocket owns the WebSocket connections the server holds for PHP: the upgrade, each
// connection's reading loop (which hands the connection's events to PHP one at a time, in
// order, through the pool), its send queue and writer, the channels it joined, and the broker
// that carries publishes and sends between servers. It must not start or supervise PHP
// processes (the pool does), parse HTTP (the front does) or frame WebSocket messages
// (github.com/gorilla/websocket does).
//
// A connection's life:
//
//	upgrade request ──origin, limit──▶ opening: onOpen runs in PHP ──101──▶ open ──▶ closing ──▶ gone
//	      │                                  │ (joins, sends queue up)      │  messages in: onMessage, one at a time
//	      └──403/503                         └──other status: sent as is    │  sends, publishes: the send queue
//	                                                                        └─ close from either side, a full send
//	                                                                           queue (1008), a silent peer, a throw
//	                                                                           (1011): onClose, then gone
//
// A server that stops (Close) closes every connection with 1001 and waits for its onClose. One
// still opening is waited for too: if its onOpen accepts in time, it opens and its first frame
// is the 1001; if Close gives up first, its onOpen is cancelled.
//
// Nothing here depends on a PHP process: a worker that dies or is replaced takes no connection
// with it; the next event of each connection goes to whichever worker is free.
package websocket

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gorilla "github.com/gorilla/websocket"

	"github.com/peregrinephp/peregrine/internal/worker"
)

// Runner runs REQUEST frames on PHP workers; *pool.Pool is one.
type Runner interface {
	Do(ctx context.Context, call *worker.Call) (pid int, err error)
}

// Options configure a Hub (the websocket section of the config).
type Options struct {
	// MaxMessageSize is the largest message a client may send; a larger one closes the
	// connection with 1009. 0 means 1 MiB.
	MaxMessageSize int64
	// PingInterval is how often the server pings; a peer silent for two intervals is closed.
	// 0 means 30 s.
	PingInterval time.Duration
	// SendQueue is how many bytes one connection may have waiting to be sent; beyond it the
	// connection is closed with 1008. 0 means 1 MiB.
	SendQueue int64
	// AllowedOrigins are the Origin values accepted besides the request's own host; "*" is any.
	AllowedOrigins []string
	// MaxConnections caps the open WebSocket connections and event-stream subscribers
	// together; at the cap an upgrade or a subscription gets 503.
	// 0 means no cap of its own (http.max_connections still caps every connection).
	MaxConnections int
	// WriteTimeout bounds each write to a client; a client that takes longer is closed.
	// 0 means 10 s.
	WriteTimeout time.Duration
	// Broker, if set, carries publishes and sends to other servers; nil keeps them here.
	Broker Broker
	// Node names this server in connection ids; empty means a random one.
	Node string
	// Key is the secret every event carries (KeyLen bytes); empty means a random one.
	Key    string
	Logger *slog.Logger
}

// Hub holds the WebSocket connections of one server.
type Hub struct {
	run  Runner
	opts Options
	log  *slog.Logger
	node string
	key  string
	seq  atomic.Uint64
	up   gorilla.Upgrader

	ctx    context.Context // ended by Close: events in flight are abandoned
	cancel context.CancelFunc

	mu       sync.RWMutex
	conns    map[string]*conn
	channels map[string]map[*conn]struct{}
	closing  bool

	wg        sync.WaitGroup // every connection's goroutines
	stats     stats
	history   history    // recent publishes, for Last-Event-ID (eventstream.go)
	deliverMu sync.Mutex // one publish delivered at a time
}

// readBuffer is each connection's read buffer: 1 KiB, not the 4 KiB the HTTP/1 front read the
// upgrade with (dropped with the upgrade), since an idle connection holds it for good.
const readBuffer = 1 << 10

// Defaults of Options' zero values.
const (
	DefaultMaxMessageSize = 1 << 20
	DefaultPingInterval   = 30 * time.Second
	DefaultSendQueue      = 1 << 20
	DefaultWriteTimeout   = 10 * time.Second
)

// New returns a Hub that runs PHP's side of its connections on run, subscribed to its broker
// (ctx bounds the subscription's start). Close it to end them.
func New(ctx context.Context, run Runner, opts Options) (*Hub, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxMessageSize <= 0 {
		opts.MaxMessageSize = DefaultMaxMessageSize
	}
	if opts.PingInterval <= 0 {
		opts.PingInterval = DefaultPingInterval
	}
	if opts.SendQueue <= 0 {
		opts.SendQueue = DefaultSendQueue
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.Node == "" {
		opts.Node = randomHex(5)
	}
	if len(opts.Key) != KeyLen {
		opts.Key = randomHex(KeyLen / 2)
	}
	// The hub's context outlives the caller's: connections end with Close, not with a request.
	hubCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h := &Hub{run: run, opts: opts, log: opts.Logger, node: opts.Node, key: opts.Key, ctx: hubCtx, cancel: cancel,
		conns: map[string]*conn{}, channels: map[string]map[*conn]struct{}{}}
	h.stats.closes = map[int]int64{}
	h.up = gorilla.Upgrader{
		CheckOrigin:      func(*http.Request) bool { return true }, // checked before PHP runs (upgrade.go)
		WriteBufferPool:  &sync.Pool{},                             // an idle connection holds no write buffer
		HandshakeTimeout: opts.WriteTimeout,
		ReadBufferSize:   readBuffer,
	}
	if opts.Broker != nil {
		if err := opts.Broker.Subscribe(ctx, h.node, h.fromBroker); err != nil {
			cancel()
			return nil, err
		}
	}
	return h, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Key returns the secret events carry, for PEREGRINE_WEBSOCKET_KEY.
func (h *Hub) Key() string { return h.key }

// Node returns this server's name in connection ids.
func (h *Hub) Node() string { return h.node }

// newID returns a connection id: this server's node, a dot, a sequence number. Ids are unique
// across servers as long as nodes are.
func (h *Hub) newID() string {
	return h.node + "." + strconv.FormatUint(h.seq.Add(1), 36)
}

// nodeOf returns the node part of a connection id.
func nodeOf(id string) string {
	if i := strings.LastIndexByte(id, '.'); i >= 0 {
		return id[:i]
	}
	return ""
}

// ErrClosed is the error of a call on a closed Hub.
var ErrClosed = errors.New("websocket: the server is stopping")

// Close closes every connection with 1001 (going away), waits up to ctx for their onClose
// events, then abandons what is left.
func (h *Hub) Close(ctx context.Context) {
	h.mu.Lock()
	h.closing = true
	conns := make([]*conn, 0, len(h.conns))
	for _, c := range h.conns {
		conns = append(conns, c)
	}
	h.mu.Unlock()
	for _, c := range conns {
		c.close(gorilla.CloseGoingAway, "server stopping")
	}
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		h.cancel()
		for _, c := range conns {
			c.abort()
		}
		<-done
	}
	h.cancel()
	if h.opts.Broker != nil {
		_ = h.opts.Broker.Close()
	}
}

// add holds c, unless the hub is closing or already holds MaxConnections (WebSockets and
// event streams alike): the check and the insert under one lock, so that upgrades and
// subscriptions arriving together cannot pass the cap together.
func (h *Hub) add(c *conn) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.addLocked(c)
}

// addOpening is add for a WebSocket's upgrade, which counts in h.wg from here (Upgrade): under
// the same lock as the check that the hub is not closing, so that a Close that did not see the
// connection refuses it, and one that did waits for it.
func (h *Hub) addOpening(c *conn) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.addLocked(c); err != nil {
		return err
	}
	h.wg.Add(1)
	return nil
}

func (h *Hub) addLocked(c *conn) error {
	switch {
	case h.closing:
		return errStopping
	case h.opts.MaxConnections > 0 && len(h.conns) >= h.opts.MaxConnections:
		return errFull
	}
	h.conns[c.id] = c
	return nil
}

// Why add refuses a connection: each answers 503 (refuse).
var (
	errStopping = errors.New("the server is stopping")
	errFull     = errors.New("too many WebSocket and event-stream connections (websocket.max_connections)")
)

// refuse answers a connection add refused with err: 503, and Retry-After when the cap is the
// reason (a connection may close soon; a stopping server will not come back here).
func (h *Hub) refuse(w http.ResponseWriter, err error) {
	h.stats.refused.Add(1)
	if errors.Is(err, errFull) {
		w.Header().Set("Retry-After", "1")
	}
	http.Error(w, err.Error(), http.StatusServiceUnavailable)
}

// remove forgets c and its channels.
func (h *Hub) remove(c *conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.conns, c.id)
	for ch := range c.channels {
		h.leaveLocked(c, ch)
	}
}

func (h *Hub) lookup(id string) *conn {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.conns[id]
}

// Count returns the open connections.
func (h *Hub) Count() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.conns)
}
