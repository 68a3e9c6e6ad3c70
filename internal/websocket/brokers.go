package websocket

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
)

// Topics: one that every server hears (publishes), one per server (sends and closes to the
// connections it holds). Redis names them peregrine:ws:all and peregrine:ws:node:NODE, NATS
// peregrine.ws.all and peregrine.ws.node.NODE.
const (
	redisPrefix = "peregrine:ws:"
	natsPrefix  = "peregrine.ws."
)

// Dial connects to the broker websocket.broker names: "" is none (nil), redis://HOST:PORT
// Redis pub/sub, nats://HOST:PORT NATS core subjects.
func Dial(ctx context.Context, broker string, log *slog.Logger) (Broker, error) {
	if broker == "" {
		return nil, nil
	}
	u, err := url.Parse(broker)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "redis":
		opts, err := redis.ParseURL(broker)
		if err != nil {
			return nil, err
		}
		c := redis.NewClient(opts)
		if err := c.Ping(ctx).Err(); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("redis %s: %w", u.Host, err)
		}
		return &redisBroker{c: c, log: log}, nil
	case "nats":
		nc, err := nats.Connect(broker, nats.MaxReconnects(-1))
		if err != nil {
			return nil, fmt.Errorf("nats %s: %w", u.Host, err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("nats %s: %w", u.Host, err)
		}
		b := &natsBroker{nc: nc, js: js, log: log}
		if err := b.history(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("nats %s: the history stream %s: %w", u.Host, natsStream, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("unknown broker %q", broker)
}

// redisBroker carries messages on Redis pub/sub.
type redisBroker struct {
	c   *redis.Client
	log *slog.Logger

	mu   sync.Mutex
	ps   *redis.PubSub
	done chan struct{}
}

func (b *redisBroker) Publish(ctx context.Context, node string, m *Message) error {
	if node == "" && m.Op == MsgPublish {
		// Kept and published in one step, so that no server hears a publish its history lacks.
		return keepAndPublish.Run(ctx, b.c, []string{redisPrefix + "history:" + m.Target, redisPrefix + "all", redisPrefix + "history-id"},
			AppendMessage(nil, m), HistoryMessages).Err()
	}
	topic := redisPrefix + "all"
	if node != "" {
		topic = redisPrefix + "node:" + node
	}
	return b.c.Publish(ctx, topic, AppendMessage(nil, m)).Err()
}

// keepAndPublish adds a channel's publish to its Redis stream (peregrine:ws:history:CHANNEL,
// capped near HistoryMessages entries, expiring HistoryAge after the last publish) and
// publishes it with the entry's id as its event id. ARGV[1] is the message without an id; the
// script rewrites its event id length and inserts the id after the target.
//
// The id is MS-SEQ from one counter for every channel (KEYS[3]: the last MS, and SEQ), not the
// stream's own '*': an event stream on several channels resumes after one id, so the ids of
// all channels must be one order. MS never goes back (a clock that does keeps the last MS), SEQ
// only grows; the counter does not expire, or the next ids could sort before the kept ones.
var keepAndPublish = redis.NewScript(`
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local last = tonumber(redis.call('HGET', KEYS[3], 'ms') or '0')
if ms < last then ms = last end
redis.call('HSET', KEYS[3], 'ms', string.format('%d', ms))
local id = string.format('%d-%d', ms, redis.call('HINCRBY', KEYS[3], 'seq', 1))
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], id, 'm', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ` + strconv.Itoa(int(HistoryAge/time.Millisecond)) + `)
local m = ARGV[1]
local tlen = struct.unpack('<I4', m, 5)
local out = string.sub(m, 1, 8) .. struct.pack('<I4', #id) .. string.sub(m, 13, 12 + tlen) .. id .. string.sub(m, 13 + tlen)
redis.call('PUBLISH', KEYS[2], out)
return id`)

// Since implements History from the channels' streams.
func (b *redisBroker) Since(ctx context.Context, channels []string, after string) ([]Kept, error) {
	if !streamID(after) {
		return nil, nil
	}
	oldest := strconv.FormatInt(time.Now().Add(-HistoryAge).UnixMilli(), 10)
	var out []Kept
	for _, ch := range channels {
		entries, err := b.c.XRangeN(ctx, redisPrefix+"history:"+ch, "("+after, "+", HistoryMessages).Result()
		if err != nil {
			return nil, fmt.Errorf("redis history of %s: %w", ch, err)
		}
		for _, e := range entries {
			raw, _ := e.Values["m"].(string)
			m, err := DecodeMessage([]byte(raw))
			if err != nil || lessID(e.ID, oldest+"-0") {
				continue
			}
			out = append(out, Kept{Channel: ch, EventID: e.ID, Data: m.Data})
		}
	}
	slices.SortStableFunc(out, func(a, b Kept) int {
		switch {
		case lessID(a.EventID, b.EventID):
			return -1
		case lessID(b.EventID, a.EventID):
			return 1
		}
		return 0
	})
	return out, nil
}

// streamID reports whether s is a Redis Streams entry id, MS-SEQ.
func streamID(s string) bool {
	ms, seq, ok := strings.Cut(s, "-")
	_, err1 := strconv.ParseUint(ms, 10, 64)
	_, err2 := strconv.ParseUint(seq, 10, 64)
	return ok && err1 == nil && err2 == nil
}

// lessID orders two stream ids.
func lessID(a, b string) bool {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	x, _ := strconv.ParseUint(am, 10, 64)
	y, _ := strconv.ParseUint(bm, 10, 64)
	if x != y {
		return x < y
	}
	x, _ = strconv.ParseUint(as, 10, 64)
	y, _ = strconv.ParseUint(bs, 10, 64)
	return x < y
}

var _ History = (*redisBroker)(nil)

func (b *redisBroker) Subscribe(ctx context.Context, node string, deliver func(*Message)) error {
	ps := b.c.Subscribe(ctx, redisPrefix+"all", redisPrefix+"node:"+node)
	for range 2 { // both subscriptions confirmed: a publish after this returns is heard
		if _, err := ps.Receive(ctx); err != nil {
			_ = ps.Close()
			return fmt.Errorf("redis subscribe: %w", err)
		}
	}
	b.mu.Lock()
	b.ps, b.done = ps, make(chan struct{})
	b.mu.Unlock()
	go func() {
		defer close(b.done)
		for msg := range ps.Channel() {
			m, err := DecodeMessage([]byte(msg.Payload))
			if err != nil {
				b.log.Warn("a malformed message on the WebSocket broker", "topic", msg.Channel, "err", err)
				continue
			}
			deliver(&m)
		}
	}()
	return nil
}

func (b *redisBroker) Close() error {
	b.mu.Lock()
	ps, done := b.ps, b.done
	b.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
		<-done
	}
	return b.c.Close()
}

// natsBroker carries messages on NATS core subjects, and keeps publishes in a JetStream
// stream for Last-Event-ID.
type natsBroker struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	log *slog.Logger

	// The event ids are EPOCH-SEQ: the stream's creation (Unix ms) and the publish's sequence
	// in it. A NATS server that restarts loses the stream (memory storage) and its sequences
	// start again at 1, so a sequence alone from before would skip that many of the new
	// stream's publishes on a resume. epoch is the stream's creation as this server last saw
	// it; lastSeq the highest sequence it was given.
	epoch   atomic.Int64
	lastSeq atomic.Uint64
}

// natsStream keeps every channel's publishes (subject peregrine.ws.hist.HEX(CHANNEL)) in
// memory: at most HistoryMessages a channel, none older than HistoryAge.
const natsStream = "PEREGRINE_WS_HISTORY"

// history makes (or updates) the history stream: at Dial, and again when a NATS server that
// restarted lost it.
func (b *natsBroker) history(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	s, err := b.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: natsStream, Subjects: []string{natsPrefix + "hist.>"},
		Storage: jetstream.MemoryStorage, MaxAge: HistoryAge, MaxMsgsPerSubject: HistoryMessages, Discard: jetstream.DiscardOld})
	if err != nil {
		return err
	}
	b.sawStream(s.CachedInfo())
	return nil
}

// sawStream notes the stream's creation as the epoch of the ids to come.
func (b *natsBroker) sawStream(info *jetstream.StreamInfo) {
	if e := info.Created.UnixMilli(); b.epoch.Swap(e) != e {
		b.lastSeq.Store(0)
	}
}

// eventID is the id of the publish the stream gave sequence seq. A sequence no higher than
// one this server was given before means the stream was made again (by another server, after
// a NATS restart this one did not notice): the epoch is read again first. What remains (the
// other server's stream had passed this one's last sequence) gives ids of the old epoch,
// which a resume replays from the stream's start: repeated events, never lost ones.
func (b *natsBroker) eventID(ctx context.Context, seq uint64) string {
	if seq <= b.lastSeq.Load() {
		if s, err := b.js.Stream(ctx, natsStream); err == nil {
			b.sawStream(s.CachedInfo())
		}
	}
	for last := b.lastSeq.Load(); seq > last && !b.lastSeq.CompareAndSwap(last, seq); last = b.lastSeq.Load() {
	}
	return strconv.FormatInt(b.epoch.Load(), 10) + "-" + strconv.FormatUint(seq, 10)
}

// resumeAfter is the sequence of the stream to replay after, for the event id a client last
// saw, and the stream's epoch: the id's sequence if it is of this stream's epoch, else 0 (the
// whole stream: a stream made after the client's last event holds only later ones). An id of
// a sequence alone (before epochs) is taken as one of this stream. The epoch is read from the
// NATS server, not from this server's memory: another server may have made the stream again.
func (b *natsBroker) resumeAfter(ctx context.Context, after string) (seq uint64, epoch int64, err error) {
	e, n, dashed := strings.Cut(after, "-")
	if !dashed {
		n = e
	}
	seq, err = strconv.ParseUint(n, 10, 64)
	if dashed && err == nil {
		epoch, err = strconv.ParseInt(e, 10, 64)
	}
	if err != nil {
		return 0, 0, errNotAnID
	}
	s, err := b.js.Stream(ctx, natsStream)
	if b.lost(err) {
		if err = b.history(ctx); err == nil {
			s, err = b.js.Stream(ctx, natsStream)
		}
	}
	if err != nil {
		return 0, 0, fmt.Errorf("nats history: %w", err)
	}
	info := s.CachedInfo()
	b.sawStream(info)
	current := info.Created.UnixMilli()
	if dashed && epoch != current {
		seq = 0
	}
	return seq, current, nil
}

// errNotAnID: a Last-Event-ID that no publish was given; the resume replays nothing.
var errNotAnID = errors.New("not an event id")

// consumerIdle is how long the server keeps a resume's consumer once it is idle: it serves
// one fetch, made at once, so the default (5 minutes) would only pile them up.
const consumerIdle = 5 * time.Second

// lost reports whether err says the history stream is gone: a NATS server that restarted
// lost it (memory storage), and every publish would fail until it is made again. Its
// sequence numbers restart with it: an event id from before replays only what the new
// stream has past that number.
func (b *natsBroker) lost(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrStreamNotFound) ||
		errors.Is(err, nats.ErrNoResponders)
}

// histSubject is a channel's subject in the history stream: hex, as a channel name may hold
// what a subject cannot (dots, spaces, wildcards).
func histSubject(channel string) string {
	return natsPrefix + "hist." + hex.EncodeToString([]byte(channel))
}

// Since implements History from the stream: the event ids are EPOCH-SEQ (eventID).
func (b *natsBroker) Since(ctx context.Context, channels []string, after string) ([]Kept, error) {
	seq, epoch, err := b.resumeAfter(ctx, after)
	if errors.Is(err, errNotAnID) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	subjects := make([]string, len(channels))
	for i, ch := range channels {
		subjects[i] = histSubject(ch)
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq: seq + 1, InactiveThreshold: consumerIdle}
	cons, err := b.js.OrderedConsumer(ctx, natsStream, cfg)
	if b.lost(err) {
		if err = b.history(ctx); err == nil {
			cons, err = b.js.OrderedConsumer(ctx, natsStream, cfg)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("nats history: %w", err)
	}
	batch, err := cons.FetchNoWait(HistoryMessages * len(channels))
	if err != nil {
		return nil, fmt.Errorf("nats history: %w", err)
	}
	var out []Kept
	for msg := range batch.Messages() {
		md, err := msg.Metadata()
		if err != nil {
			continue
		}
		name, err := hex.DecodeString(strings.TrimPrefix(msg.Subject(), natsPrefix+"hist."))
		if err != nil {
			continue
		}
		out = append(out, Kept{Channel: string(name), EventID: strconv.FormatInt(epoch, 10) + "-" + strconv.FormatUint(md.Sequence.Stream, 10), Data: msg.Data()})
	}
	return out, batch.Error()
}

var _ History = (*natsBroker)(nil)

// Publish returns once the NATS server has the message (a flush), as a Redis PUBLISH does:
// PHP's call says whether it got there, and publishes that follow it come after it.
func (b *natsBroker) Publish(ctx context.Context, node string, m *Message) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	subject := natsPrefix + "all"
	if node != "" {
		subject = natsPrefix + "node." + node
	} else if m.Op == MsgPublish {
		// Kept first, then published with the stream's sequence as its event id: a server
		// may hear it live after a subscriber's replay had it already (subscribe skips it).
		ack, err := b.js.Publish(ctx, histSubject(m.Target), m.Data)
		if b.lost(err) {
			if err = b.history(ctx); err == nil {
				ack, err = b.js.Publish(ctx, histSubject(m.Target), m.Data)
			}
		}
		if err != nil {
			return fmt.Errorf("nats history: %w", err)
		}
		kept := *m
		kept.EventID = b.eventID(ctx, ack.Sequence)
		m = &kept
	}
	if err := b.nc.Publish(subject, AppendMessage(nil, m)); err != nil {
		return err
	}
	return b.nc.FlushWithContext(ctx)
}

func (b *natsBroker) Subscribe(ctx context.Context, node string, deliver func(*Message)) error {
	handle := func(msg *nats.Msg) {
		m, err := DecodeMessage(msg.Data)
		if err != nil {
			b.log.Warn("a malformed message on the WebSocket broker", "subject", msg.Subject, "err", err)
			return
		}
		deliver(&m)
	}
	for _, s := range []string{natsPrefix + "all", natsPrefix + "node." + node} {
		if _, err := b.nc.Subscribe(s, handle); err != nil {
			return fmt.Errorf("nats subscribe %s: %w", s, err)
		}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	return b.nc.FlushWithContext(ctx) // the server has the subscriptions
}

func (b *natsBroker) Close() error {
	return b.nc.Drain()
}
