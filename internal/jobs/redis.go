package jobs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisOptions configure the redis driver.
type RedisOptions struct {
	Address string // host:port
	Stream  string // the stream's key; the delayed set and the dead letters use it as a prefix
	// Timeout is the pipeline's timeout: a job received longer ago than Timeout plus
	// ReclaimGrace and not settled is taken over from its (dead) server.
	Timeout time.Duration
}

// ReclaimGrace is added to a pipeline's timeout to make the lease of a job a server holds
// (package doc, "Leases"): the lease is renewed every quarter of it, and a job whose server
// stopped renewing is received again elsewhere once it expires.
const ReclaimGrace = 2 * time.Second

// redisGroup is the consumer group every server reads the stream through.
const redisGroup = "peregrine"

// Redis is the redis driver: the queue is a Redis stream read through one consumer group, so
// every entry goes to one server; delayed jobs (and retries after their backoff) wait in a
// sorted set by due time, from which any server's mover adds them to the stream with one
// script; dead letters are a second stream. Each server reads as a consumer of its own name,
// keeps the entries it holds by resetting their idle time (Renew: XCLAIM JUSTID, only while
// they are still its own), and takes over (XAUTOCLAIM) the entries whose lease expired: idle
// for more than Timeout + ReclaimGrace, their server having stopped renewing them.
//
// A broker outage longer than the lease stops every server's renewals at once: when Redis is
// back, the entries still held look expired, to their own server as much as to the others. A
// server therefore never takes back an entry it holds (it keeps their ids: held), and takes
// over other servers' entries only once it has reached Redis without a failure for a whole
// lease (reachedSince), by when their living holders have renewed them.
//
// Keys: STREAM (the queue), STREAM:delayed (sorted set, score = due time in ms, member = the
// job's JSON), STREAM:dead (stream of the dead letters), STREAM:started (hash, entry id -> the
// runs of that entry begun on a consumer; removed with the entry).
type Redis struct {
	rdb      *redis.Client
	opts     RedisOptions
	consumer string
	delayed  string
	dead     string
	started  string

	lastReclaim atomic.Int64 // unix ms of the last XAUTOCLAIM
	// reachedSince is when, in unix ms, the commands began to reach Redis again after the
	// last one that could not (or since NewRedis); 0 while they fail.
	reachedSince atomic.Int64

	mu   sync.Mutex          // guards held
	held map[string]struct{} // the entries received here and not yet settled, given back or lost

	kick      chan struct{}
	stop      context.CancelFunc
	moverDone chan struct{}
	closeOnce sync.Once
}

var _ Driver = (*Redis)(nil)

// NewRedis connects to Redis, creates the consumer group if it does not exist and starts the
// mover of delayed jobs.
func NewRedis(ctx context.Context, opts RedisOptions) (*Redis, error) {
	rdb := redis.NewClient(&redis.Options{Addr: opts.Address, ReadTimeout: 5 * time.Second, PoolSize: 64})
	host, _ := os.Hostname()
	r := &Redis{
		rdb: rdb, opts: opts,
		consumer: fmt.Sprintf("%s-%d-%s", host, os.Getpid(), newID()[:8]),
		delayed:  opts.Stream + ":delayed",
		dead:     opts.Stream + ":dead",
		started:  opts.Stream + ":started",
		kick:     make(chan struct{}, 1),
		held:     map[string]struct{}{},
	}
	rdb.AddHook(contactHook{r})
	// From 0: jobs pushed before any consumer existed are read too.
	err := rdb.XGroupCreateMkStream(ctx, opts.Stream, redisGroup, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis %s: create the consumer group of %s: %w", opts.Address, opts.Stream, err)
	}
	// A server just started cannot tell an expired lease from one whose holder could not
	// renew it during an outage that has just ended: it waits a lease too.
	r.reachedSince.Store(now())
	mctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	r.moverDone = make(chan struct{})
	go r.mover(mctx)
	return r, nil
}

// Push implements Driver.
func (r *Redis) Push(ctx context.Context, j *Job) error {
	if j.Due > now() {
		if err := r.rdb.ZAdd(ctx, r.delayed, redis.Z{Score: float64(j.Due), Member: j.encode()}).Err(); err != nil {
			return err
		}
		r.nudge()
		return nil
	}
	return r.rdb.XAdd(ctx, &redis.XAddArgs{Stream: r.opts.Stream, Values: []any{"job", j.encode()}}).Err()
}

func (r *Redis) nudge() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// moveDue moves the due members of the delayed set to the stream, at most ARGV[2] of them, and
// returns the due time of the earliest one left, or -1.
var moveDue = redis.NewScript(`
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, m in ipairs(due) do
  redis.call('XADD', KEYS[2], '*', 'job', m)
  redis.call('ZREM', KEYS[1], m)
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first[2] then return first[2] end
return -1
`)

// moverWait caps how long the mover sleeps: another server may add a job due earlier than the
// earliest this one knows of.
const moverWait = time.Second

// mover moves delayed jobs to the stream when they are due. It sleeps until the earliest due
// time (at most moverWait) or until this server adds a delayed job.
func (r *Redis) mover(ctx context.Context) {
	defer close(r.moverDone)
	failures := 0
	for {
		wait := moverWait
		res, err := moveDue.Run(ctx, r.rdb, []string{r.delayed, r.opts.Stream}, now(), 1000).Text()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			wait = min(time.Duration(failures)*100*time.Millisecond, 5*time.Second)
		} else if next, _ := strconv.ParseFloat(res, 64); next >= 0 {
			failures = 0
			wait = min(wait, max(0, time.Duration(int64(next)-now())*time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-r.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// Receive implements Driver: entries other servers left behind first, then new ones.
func (r *Redis) Receive(ctx context.Context, max int) ([]*Delivery, error) {
	for {
		if ds, err := r.reclaim(ctx, max); err != nil || len(ds) > 0 {
			return ds, err
		}
		res, err := r.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: redisGroup, Consumer: r.consumer, Streams: []string{r.opts.Stream, ">"},
			Count: int64(max), Block: time.Second,
		}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(err, redis.ErrClosed) {
				return nil, ErrClosed
			}
			if strings.HasPrefix(err.Error(), "NOGROUP") { // the stream was deleted: make it again
				_ = r.rdb.XGroupCreateMkStream(ctx, r.opts.Stream, redisGroup, "0").Err()
			}
			return nil, err
		}
		var ds []*Delivery
		r.mu.Lock()
		for _, s := range res {
			for _, m := range s.Messages {
				r.held[m.ID] = struct{}{}
				ds = append(ds, r.delivery(m, 0))
			}
		}
		r.mu.Unlock()
		if len(ds) > 0 {
			return ds, nil
		}
	}
}

// delivery makes a Delivery of entry m, of which prior runs had begun (on servers that died).
func (r *Redis) delivery(m redis.XMessage, prior int) *Delivery {
	raw, _ := m.Values["job"].(string)
	j, err := decodeJob([]byte(raw))
	if err != nil { // not ours: give it to the dead letters rather than loop on it
		j = &Job{ID: m.ID, Attempt: 1 << 20, Payload: raw, Error: err.Error()}
	}
	j.Attempt += prior
	return &Delivery{Job: j, ref: m.ID}
}

// reclaim takes over entries whose lease expired (idle for more than Timeout + ReclaimGrace:
// their server stopped renewing them), at most once per half of that time per server, and only
// once this server has reached Redis for a whole lease. Their attempt adds the runs begun on
// them (STREAM:started), not the deliveries. An entry this server holds is not delivered again:
// XAUTOCLAIM gave it back to the consumer that had it, and its Delivery here goes on.
func (r *Redis) reclaim(ctx context.Context, max int) ([]*Delivery, error) {
	idle := r.opts.Timeout + ReclaimGrace
	if since := r.reachedSince.Load(); since == 0 || now()-since < idle.Milliseconds() {
		return nil, nil
	}
	last := r.lastReclaim.Load()
	if now()-last < (idle/2).Milliseconds() || !r.lastReclaim.CompareAndSwap(last, now()) {
		return nil, nil
	}
	msgs, _, err := r.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream: r.opts.Stream, Group: redisGroup, Consumer: r.consumer, MinIdle: idle, Start: "0-0", Count: int64(max),
	}).Result()
	if err != nil || len(msgs) == 0 {
		if err != nil && !strings.HasPrefix(err.Error(), "NOGROUP") {
			return nil, err
		}
		return nil, nil
	}
	r.lastReclaim.Store(0) // there may be more: look again at the next Receive
	r.mu.Lock()
	msgs = slices.DeleteFunc(msgs, func(m redis.XMessage) bool {
		_, mine := r.held[m.ID]
		r.held[m.ID] = struct{}{}
		return mine
	})
	r.mu.Unlock()
	if len(msgs) == 0 {
		return nil, nil
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	begun, err := r.rdb.HMGet(ctx, r.started, ids...).Result()
	if err != nil {
		r.forget(ids...)
		return nil, err // the entries are this server's now: received again after the lease
	}
	ds := make([]*Delivery, 0, len(msgs))
	for i, m := range msgs {
		n, _ := strconv.Atoi(fmt.Sprint(begun[i])) // nil (none begun) counts 0
		ds = append(ds, r.delivery(m, n))
	}
	return ds, nil
}

// holdScript runs for each entry ARGV[3:] still held by consumer ARGV[2] of group ARGV[1] on
// stream KEYS[1]: it resets its idle time (XCLAIM JUSTID counts no delivery) and, with
// KEYS[2] (STREAM:started) given, counts a run begun. It returns the ids held by another
// consumer now (or settled).
var holdScript = redis.NewScript(`
local lost = {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2])
  if #p == 0 then
    table.insert(lost, ARGV[i])
  else
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
    if KEYS[2] then redis.call('HINCRBY', KEYS[2], ARGV[i], 1) end
  end
end
return lost
`)

func (r *Redis) hold(ctx context.Context, ds []*Delivery, start bool) ([]*Delivery, error) {
	keys := []string{r.opts.Stream}
	if start {
		keys = append(keys, r.started)
	}
	args := []any{redisGroup, r.consumer}
	byID := make(map[string]*Delivery, len(ds))
	for _, d := range ds {
		args = append(args, d.ref.(string))
		byID[d.ref.(string)] = d
	}
	ids, err := holdScript.Run(ctx, r.rdb, keys, args...).StringSlice()
	if err != nil {
		return nil, err
	}
	r.forget(ids...)
	lost := make([]*Delivery, 0, len(ids))
	for _, id := range ids {
		lost = append(lost, byID[id])
	}
	return lost, nil
}

// forget removes ids from the entries this server holds: settled, given back, taken over by
// another server, or given up by the pipeline (its Start failed); should the entry still be
// pending, it is received again once its lease expires, here or elsewhere.
func (r *Redis) forget(ids ...string) {
	r.mu.Lock()
	for _, id := range ids {
		delete(r.held, id)
	}
	r.mu.Unlock()
}

// Start implements Driver: in one script, the lease checked and renewed and the run counted.
// A job whose Start failed is given up by its server (it runs once its lease expires).
func (r *Redis) Start(ctx context.Context, d *Delivery) error {
	lost, err := r.hold(ctx, []*Delivery{d}, true)
	if err != nil {
		r.forget(d.ref.(string))
		return err
	}
	if len(lost) > 0 {
		return ErrLeaseLost
	}
	return nil
}

// Renew implements Driver.
func (r *Redis) Renew(ctx context.Context, ds []*Delivery) ([]*Delivery, error) {
	return r.hold(ctx, ds, false)
}

// settleScript settles entry ARGV[2] of stream KEYS[1] (group ARGV[1]) once: only the first
// settlement of an entry acknowledges it (a server that stalled past its lease and the one that
// took the job over may both settle it), and only that one adds what follows it: with ARGV[3]
// "xadd", ARGV[4] to stream KEYS[3]; with "zadd", ARGV[4] to sorted set KEYS[3] at score
// ARGV[5]. It returns 1 if it settled the entry, 0 if another settlement came first.
var settleScript = redis.NewScript(`
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('XDEL', KEYS[1], ARGV[2])
redis.call('HDEL', KEYS[2], ARGV[2])
if ARGV[3] == 'xadd' then
  redis.call('XADD', KEYS[3], '*', 'job', ARGV[4])
elseif ARGV[3] == 'zadd' then
  redis.call('ZADD', KEYS[3], ARGV[5], ARGV[4])
end
return 1
`)

// settle removes d's entry and, in the same script, adds then (a job, "xadd" to stream to or
// "zadd" to the delayed set at due). It returns ErrLeaseLost if another server settled the
// entry first: then nothing is added.
func (r *Redis) settle(ctx context.Context, d *Delivery, how, to string, then *Job, due int64) error {
	// Settled, or given up by the pipeline if this failed: then it runs once its lease expires.
	defer r.forget(d.ref.(string))
	var job []byte
	if then != nil {
		job = then.encode()
	}
	n, err := settleScript.Run(ctx, r.rdb, []string{r.opts.Stream, r.started, to},
		redisGroup, d.ref.(string), how, job, due).Int()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrLeaseLost
	}
	return nil
}

// Ack implements Driver.
func (r *Redis) Ack(ctx context.Context, d *Delivery) error {
	return r.settle(ctx, d, "", r.opts.Stream, nil, 0)
}

// Retry implements Driver: the next attempt and the settlement of this one in one script.
func (r *Redis) Retry(ctx context.Context, d *Delivery, next *Job) error {
	if next.Due <= now() {
		return r.settle(ctx, d, "xadd", r.opts.Stream, next, 0)
	}
	err := r.settle(ctx, d, "zadd", r.delayed, next, next.Due)
	if err == nil {
		r.nudge()
	}
	return err
}

// Release implements Driver: the job is added again, at the end of the stream, in the same
// script as the removal of the entry received. Its attempt keeps the runs begun that died: the
// new entry has none begun.
func (r *Redis) Release(ctx context.Context, d *Delivery) error {
	return r.settle(ctx, d, "xadd", r.opts.Stream, d.Job, 0)
}

// Bury implements Driver.
func (r *Redis) Bury(ctx context.Context, d *Delivery, keep bool) error {
	how := ""
	if keep {
		how = "xadd"
	}
	return r.settle(ctx, d, how, r.dead, d.Job, 0)
}

// reviveScript moves dead letter ARGV[1] of KEYS[1] to the stream KEYS[2] as ARGV[2], or
// does nothing if another server did it first; it returns 1 if it moved it.
var reviveScript = redis.NewScript(`
if redis.call('XDEL', KEYS[1], ARGV[1]) == 1 then
  redis.call('XADD', KEYS[2], '*', 'job', ARGV[2])
  return 1
end
return 0
`)

// deadBatch is how many dead letters one XRANGE reads: up to 10 MiB of payloads.
const deadBatch = 10

// deadLetters calls f with each dead letter, oldest first, until f returns false.
func (r *Redis) deadLetters(ctx context.Context, f func(entry string, e deadEntry) bool) error {
	from := "-"
	for {
		msgs, err := r.rdb.XRangeN(ctx, r.dead, from, "+", deadBatch).Result()
		if err != nil || len(msgs) == 0 {
			return err
		}
		for _, m := range msgs {
			raw, _ := m.Values["job"].(string)
			if !f(m.ID, deadEntry{raw: raw, fallback: m.ID}) {
				return nil
			}
		}
		from = "(" + msgs[len(msgs)-1].ID
	}
}

func (r *Redis) revive(ctx context.Context, entry string, j *Job) (bool, error) {
	n, err := reviveScript.Run(ctx, r.rdb, []string{r.dead, r.opts.Stream}, entry, j.revived().encode()).Int()
	return n == 1, err
}

// Revive implements Driver.
func (r *Redis) Revive(ctx context.Context) (int, error) {
	n := 0
	var ferr error
	err := r.deadLetters(ctx, func(entry string, e deadEntry) bool {
		ok, err := r.revive(ctx, entry, e.job())
		if ok {
			n++
		}
		ferr = err
		return err == nil
	})
	return n, errors.Join(err, ferr)
}

// DeadLetters implements Driver.
func (r *Redis) DeadLetters(ctx context.Context, limit, maxPayload int) ([]*Job, error) {
	return listDead(ctx, r.deadLetters, limit, maxPayload)
}

// DeadLetter implements Driver.
func (r *Redis) DeadLetter(ctx context.Context, id string) (*Job, error) {
	_, j, err := findDead(ctx, r.deadLetters, id)
	return j, err
}

// ReviveOne implements Driver.
func (r *Redis) ReviveOne(ctx context.Context, id string) error {
	entry, j, err := findDead(ctx, r.deadLetters, id)
	if err != nil {
		return err
	}
	ok, err := r.revive(ctx, entry, j)
	if err == nil && !ok { // another server revived it first
		err = ErrNoSuchJob
	}
	return err
}

// DeleteDead implements Driver.
func (r *Redis) DeleteDead(ctx context.Context, id string) error {
	entry, _, err := findDead(ctx, r.deadLetters, id)
	if err != nil {
		return err
	}
	n, err := r.rdb.XDel(ctx, r.dead, entry).Result()
	if err == nil && n == 0 { // deleted or revived by another server first
		err = ErrNoSuchJob
	}
	return err
}

// Stats implements Driver. Settled entries are deleted, so the stream holds what is queued
// (in the stream or received and not begun) and what is running (begun: STREAM:started).
func (r *Redis) Stats(ctx context.Context) (Stats, error) {
	pipe := r.rdb.Pipeline()
	length := pipe.XLen(ctx, r.opts.Stream)
	started := pipe.HLen(ctx, r.started)
	delayed := pipe.ZCard(ctx, r.delayed)
	dead := pipe.XLen(ctx, r.dead)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Stats{}, err
	}
	running := started.Val()
	return Stats{Queued: max(0, length.Val()-running), Delayed: delayed.Val(), Running: running, Dead: dead.Val()}, nil
}

// contactHook notes whether each command reached Redis (reachedSince).
type contactHook struct{ r *Redis }

func (h contactHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h contactHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.r.reached(err)
		return err
	}
}

func (h contactHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.r.reached(err)
		return err
	}
}

// reached notes the outcome of a command: a failure to reach Redis (a network error, a
// timeout, or Redis still loading its data after a restart) restarts the wait before this
// server takes over other servers' jobs; an answer, an error reply among them, ends a failure.
func (r *Redis) reached(err error) {
	var reply redis.Error
	switch {
	case errors.Is(err, context.Canceled): // the caller gave up: it says nothing of Redis
	case err == nil, errors.Is(err, redis.Nil), errors.As(err, &reply) && !strings.HasPrefix(err.Error(), "LOADING"):
		if r.reachedSince.Load() == 0 {
			r.reachedSince.CompareAndSwap(0, now())
		}
	default:
		r.reachedSince.Store(0)
	}
}

// Close implements Driver.
func (r *Redis) Close() error {
	var err error
	r.closeOnce.Do(func() {
		r.stop()
		<-r.moverDone
		err = r.rdb.Close()
	})
	return err
}
