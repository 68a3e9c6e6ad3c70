package jobs

import (
	"context"
	"errors"
	"fmt"
	"os"
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

// ReclaimGrace is added to a pipeline's timeout before another server reclaims a job: the
// timeout kills a job's worker, and its server then needs a moment to settle the job.
const ReclaimGrace = 2 * time.Second

// redisGroup is the consumer group every server reads the stream through.
const redisGroup = "peregrine"

// Redis is the redis driver: the queue is a Redis stream read through one consumer group, so
// every entry goes to one server; delayed jobs (and retries after their backoff) wait in a
// sorted set by due time, from which any server's mover adds them to the stream with one
// script; dead letters are a second stream. Each server reads as a consumer of its own name and
// takes over (XAUTOCLAIM) the entries another consumer received more than Timeout +
// ReclaimGrace ago without settling them.
//
// Keys: STREAM (the queue), STREAM:delayed (sorted set, score = due time in ms, member = the
// job's JSON), STREAM:dead (stream of the dead letters).
type Redis struct {
	rdb      *redis.Client
	opts     RedisOptions
	consumer string
	delayed  string
	dead     string

	lastReclaim atomic.Int64 // unix ms of the last XAUTOCLAIM
	kick        chan struct{}
	stop        context.CancelFunc
	moverDone   chan struct{}
	closeOnce   sync.Once
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
		kick:     make(chan struct{}, 1),
	}
	// From 0: jobs pushed before any consumer existed are read too.
	err := rdb.XGroupCreateMkStream(ctx, opts.Stream, redisGroup, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis %s: create the consumer group of %s: %w", opts.Address, opts.Stream, err)
	}
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
		for _, s := range res {
			for _, m := range s.Messages {
				ds = append(ds, r.delivery(m, 1))
			}
		}
		if len(ds) > 0 {
			return ds, nil
		}
	}
}

func (r *Redis) delivery(m redis.XMessage, deliveries int64) *Delivery {
	raw, _ := m.Values["job"].(string)
	j, err := decodeJob([]byte(raw))
	if err != nil { // not ours: give it to the dead letters rather than loop on it
		j = &Job{ID: m.ID, Attempt: 1 << 20, Payload: raw, Error: err.Error()}
	}
	j.Attempt += int(deliveries - 1)
	return &Delivery{Job: j, ref: redisRef{id: m.ID, extra: int(deliveries - 1)}}
}

// redisRef is a Redis delivery's handle: its entry, and the deliveries before it that died.
type redisRef struct {
	id    string
	extra int
}

func (r *Redis) extraDeliveries(d *Delivery) int { return d.ref.(redisRef).extra }

// reclaim takes over entries received by any consumer more than Timeout + ReclaimGrace ago,
// at most once per half of that time per server.
func (r *Redis) reclaim(ctx context.Context, max int) ([]*Delivery, error) {
	idle := r.opts.Timeout + ReclaimGrace
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
	ds := make([]*Delivery, 0, len(msgs))
	for _, m := range msgs {
		deliveries := int64(2)
		if p, err := r.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: r.opts.Stream, Group: redisGroup,
			Start: m.ID, End: m.ID, Count: 1}).Result(); err == nil && len(p) == 1 {
			deliveries = p[0].RetryCount
		}
		ds = append(ds, r.delivery(m, deliveries))
	}
	return ds, nil
}

func (r *Redis) settle(pipe redis.Pipeliner, ctx context.Context, d *Delivery) {
	id := d.ref.(redisRef).id
	pipe.XAck(ctx, r.opts.Stream, redisGroup, id)
	pipe.XDel(ctx, r.opts.Stream, id)
}

// Ack implements Driver.
func (r *Redis) Ack(ctx context.Context, d *Delivery) error {
	_, err := r.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		r.settle(pipe, ctx, d)
		return nil
	})
	return err
}

// Retry implements Driver: the next attempt and the settlement of this one in one transaction.
func (r *Redis) Retry(ctx context.Context, d *Delivery, next *Job) error {
	delayed := next.Due > now()
	_, err := r.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		if delayed {
			pipe.ZAdd(ctx, r.delayed, redis.Z{Score: float64(next.Due), Member: next.encode()})
		} else {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: r.opts.Stream, Values: []any{"job", next.encode()}})
		}
		r.settle(pipe, ctx, d)
		return nil
	})
	if err == nil && delayed {
		r.nudge()
	}
	return err
}

// Release implements Driver: the job is added again, at the end of the stream, in the same
// transaction as the removal of the entry received.
func (r *Redis) Release(ctx context.Context, d *Delivery) error {
	j := *d.Job
	j.Attempt -= r.extraDeliveries(d)
	_, err := r.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: r.opts.Stream, Values: []any{"job", j.encode()}})
		r.settle(pipe, ctx, d)
		return nil
	})
	return err
}

// Bury implements Driver.
func (r *Redis) Bury(ctx context.Context, d *Delivery, keep bool) error {
	_, err := r.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		if keep {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: r.dead, Values: []any{"job", d.Job.encode()}})
		}
		r.settle(pipe, ctx, d)
		return nil
	})
	return err
}

// Revive implements Driver.
func (r *Redis) Revive(ctx context.Context) (int, error) {
	n := 0
	for {
		msgs, err := r.rdb.XRangeN(ctx, r.dead, "-", "+", 100).Result()
		if err != nil || len(msgs) == 0 {
			return n, err
		}
		for _, m := range msgs {
			raw, _ := m.Values["job"].(string)
			j, err := decodeJob([]byte(raw))
			if err != nil {
				return n, err
			}
			j.Attempt, j.Error, j.Due, j.Pushed = 1, "", 0, now()
			if _, err := r.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: r.opts.Stream, Values: []any{"job", j.encode()}})
				pipe.XDel(ctx, r.dead, m.ID)
				return nil
			}); err != nil {
				return n, err
			}
			n++
		}
	}
}

// Stats implements Driver. Settled entries are deleted, so the stream holds what is queued and
// what is running.
func (r *Redis) Stats(ctx context.Context) (Stats, error) {
	pipe := r.rdb.Pipeline()
	length := pipe.XLen(ctx, r.opts.Stream)
	pending := pipe.XPending(ctx, r.opts.Stream, redisGroup)
	delayed := pipe.ZCard(ctx, r.delayed)
	dead := pipe.XLen(ctx, r.dead)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Stats{}, err
	}
	var running int64
	if p, err := pending.Result(); err == nil {
		running = p.Count
	}
	return Stats{Queued: max(0, length.Val()-running), Delayed: delayed.Val(), Running: running, Dead: dead.Val()}, nil
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
