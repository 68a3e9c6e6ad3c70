// Package jobs owns background jobs: pipelines (jobs.pipelines), the drivers that keep their
// queues (memory, in this server; redis, Redis Streams with a consumer group; nats, a JetStream
// stream with a durable pull consumer), and the consume loop that hands each due job to a
// handler and turns its outcome into an acknowledgement, a retry after a backoff or a dead
// letter. It knows nothing of PHP or of the worker pool: the daemon gives Consume a Handler
// that runs the job on a consumer worker. It must not run a job its server does not hold, nor
// count an attempt no consumer began.
//
// A job's life, whatever the driver:
//
//	Push ──delay?──> delayed ──due──> queued ──Receive──> held ──Start──> running ──handler ok──> acked (gone)
//	                    ^                                  │                │  │
//	                    │                       Release    │                │  │ attempt > retries
//	                    │   (pause, stop) <────────────────┘                │  └──> dead (dead_letter) or dropped
//	                    └──────── Retry (backoff), attempt <= retries <─────┘
//	    its server dies: once its lease expires another server receives it again; the attempt
//	    counts the runs that had Started, not the receives
//
// # Leases: who holds a job, and when
//
// A job received from a shared broker (Receive) belongs to the server that received it: that
// server holds its lease until it settles the job (Ack, Retry, Bury or Release). The lease
// lasts Timeout + ReclaimGrace after its last renewal; Consume renews the lease of every job
// it holds, those waiting here for a free consumer (prefetched) as much as those running,
// every RenewEvery (a quarter of the lease). So a job held by a living server is never taken
// by another, however long it waits here: only a server that stopped renewing (it died, or
// stalled longer than three quarters of the lease) loses its jobs, and they are received again
// elsewhere. Redis: renewing is an XCLAIM ... JUSTID of the entry by its own consumer, which
// resets its idle time without counting a delivery, done only if the entry is still this
// server's (XPENDING), so a lease lost to another server is noticed and never taken back;
// reclaiming is XAUTOCLAIM past the lease, done only by a server that has reached Redis for a
// whole lease (after an outage longer than the lease every lease looks expired, until the
// living holders renew them), and never of an entry the server holds itself. NATS: renewing
// is an in-progress acknowledgement (+WPI), which restarts the ack wait; JetStream redelivers
// past it.
//
// An attempt counts only once a consumer began it: Start, called by Consume just before the
// handler, records in the broker that this delivery began (redis: the hash STREAM:started,
// entry id -> runs begun; nats: a marker message in STREAM_STARTED), after checking (redis)
// that the lease is still this server's. A job received again after its server died has its
// Attempt raised by the runs that had begun, not by the deliveries: a job fetched ahead and
// never started runs again as the same attempt. The markers go with the job's settlement.
//
// Of two servers that hold one job (one stalled past its lease and resumed), one only begins it
// and one only settles it: the redis driver settles an entry only while it is unacknowledged (the
// first settlement wins), the nats driver begins and settles a job that may have had another
// holder only if its marker is still the one it saw (expected last sequence per subject).
// A settlement that lost returns ErrLeaseLost and changes nothing.
//
// How many jobs a server holds ahead is Options.Prefetch per consumer (jobs.pipelines.P.prefetch).
//
// Delivery is at least once: a job is removed only after its handler returned. A job runs
// twice only when its server died (or lost its lease by stalling, or by not reaching the
// broker for longer than the lease; on NATS, also when no server could) after the job began
// and before its settlement reached the broker.
package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// MaxPayload is the largest payload a job may carry, in bytes.
const MaxPayload = 1 << 20

// Limits on a job's headers: how many, and their names and values together, in bytes.
const (
	MaxHeaders     = 64
	MaxHeaderBytes = 16 << 10
)

// Errors returned by Push and the drivers.
var (
	ErrUnknownPipeline = errors.New("jobs: no such pipeline")
	ErrTooLarge        = errors.New("jobs: payload or headers too large")
	ErrClosed          = errors.New("jobs: driver closed")
	// ErrLeaseLost: another server took the job over (this one stalled past its lease).
	ErrLeaseLost = errors.New("jobs: the job's lease was lost to another server")
	// ErrNoSuchJob: no dead letter has that job id.
	ErrNoSuchJob = errors.New("jobs: no such dead letter")
	// ErrNotBegun: a Handler could not hand the job to a consumer (none can run, or the
	// server is stopping): no attempt was made, and the job is given back, not failed.
	ErrNotBegun = errors.New("jobs: no consumer took the job")
)

// Job is one unit of background work.
type Job struct {
	ID       string            `json:"id"`
	Pipeline string            `json:"pipeline"`
	Payload  string            `json:"payload"`
	Headers  map[string]string `json:"headers,omitempty"`
	// Attempt counts the runs of this job, the current one included: 1 on the first.
	Attempt int `json:"attempt"`
	// Pushed is when the job was pushed (or revived from the dead letters), in Unix milliseconds;
	// retries keep it.
	Pushed int64 `json:"pushed"`
	// Due is when a delayed job becomes runnable, in Unix milliseconds; 0 means at once.
	Due int64 `json:"due,omitempty"`
	// Error is why the previous attempt failed; empty on the first. In a dead letter, why the
	// last one failed.
	Error string `json:"error,omitempty"`
	// Life counts the job's revivals from the dead letters (0 before the first): with the
	// attempt, it makes each publish of the job unique (NATS message ids).
	Life int `json:"life,omitempty"`
	// Died is when the job went to the dead letters, in Unix milliseconds.
	Died int64 `json:"died,omitempty"`
}

// revived returns the job as a revival from the dead letters makes it: a first attempt of
// its next life, runnable at once.
func (j *Job) revived() *Job {
	r := *j
	r.Attempt, r.Error, r.Due, r.Pushed, r.Died = 1, "", 0, now(), 0
	r.Life++
	return &r
}

// next returns the job's next attempt after a failure for reason.
func (j *Job) next(reason string) *Job {
	n := *j
	n.Attempt++
	n.Error = reason
	n.Due = 0
	return &n
}

func (j *Job) encode() []byte {
	b, _ := json.Marshal(j) // a Job always marshals
	return b
}

func decodeJob(b []byte) (*Job, error) {
	var j Job
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("jobs: a stored job does not decode: %w", err)
	}
	if j.Attempt < 1 {
		j.Attempt = 1
	}
	return &j, nil
}

// newID returns a job id: 16 random bytes in hex.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Delivery is a job received from a driver, to be acknowledged, retried or buried through the
// same driver.
type Delivery struct {
	Job *Job
	ref any // the driver's handle: a stream entry id, a JetStream message

	// lost is set when a renewal found that another server holds the job now: it must not
	// start here.
	lost atomic.Bool
}

// Stats are what a driver knows of its queue. On a shared broker they count every server's jobs.
type Stats struct {
	Queued  int64 `json:"queued"`  // waiting to be received, or received and not begun
	Delayed int64 `json:"delayed"` // waiting for their time (delay or backoff)
	Running int64 `json:"running"` // begun on a consumer (Start) and not yet settled
	Dead    int64 `json:"dead"`    // in the dead letters
}

// Driver keeps a pipeline's queue. Its methods are safe for concurrent use. Every method that
// changes the queue returns only once the broker has stored the change.
//
// A Delivery is its receiver's until it is settled (Ack, Retry, Bury, Release), its Start
// fails, or Renew reports it lost: the caller ends each Delivery one of these ways. Until then
// the redis driver does not deliver its entry again to this server, whatever its lease.
type Driver interface {
	// Push stores j, runnable at once or, when j.Due is set, from then on.
	Push(ctx context.Context, j *Job) error
	// Receive blocks until at least one job is runnable (at most max), or ctx is done. A job
	// received again after its server died has its Attempt raised by the runs that died.
	Receive(ctx context.Context, max int) ([]*Delivery, error)
	// Ack removes a job that ran successfully.
	Ack(ctx context.Context, d *Delivery) error
	// Retry replaces a failed job with its next attempt, runnable from next.Due (or at once).
	Retry(ctx context.Context, d *Delivery, next *Job) error
	// Bury removes a job that failed its last attempt and, when keep is set, adds it to the
	// dead letters.
	Bury(ctx context.Context, d *Delivery, keep bool) error
	// Release gives back a job received but not started (its pipeline was paused or is
	// stopping), as runnable at once and without counting an attempt.
	Release(ctx context.Context, d *Delivery) error
	// Start records in the broker that a consumer begins d: from then on, should this server
	// die, the run counts as an attempt. It returns ErrLeaseLost if another server holds d now
	// (the job must not run here).
	Start(ctx context.Context, d *Delivery) error
	// Renew keeps the leases of ds, jobs this server holds, alive for another Timeout +
	// ReclaimGrace, and returns those it found held by another server now.
	Renew(ctx context.Context, ds []*Delivery) (lost []*Delivery, err error)
	// Revive moves every dead letter back to the queue as a first attempt of a new life; it
	// returns how many.
	Revive(ctx context.Context) (int, error)
	// DeadLetters lists up to limit dead letters, oldest first; with maxPayload > 0, a payload
	// longer than that is cut (CutPayload).
	DeadLetters(ctx context.Context, limit, maxPayload int) ([]*Job, error)
	// DeadLetter returns the dead letter of job id, or ErrNoSuchJob; it reads the others only
	// as far as their ids.
	DeadLetter(ctx context.Context, id string) (*Job, error)
	// ReviveOne moves the dead letter of job id back to the queue as Revive does; ReviveOne and
	// DeleteDead return ErrNoSuchJob if there is none.
	ReviveOne(ctx context.Context, id string) error
	// DeleteDead removes the dead letter of job id.
	DeleteDead(ctx context.Context, id string) error
	// Stats reports the queue's sizes.
	Stats(ctx context.Context) (Stats, error)
	// Close releases the driver's connections; jobs it had received and not settled are left to
	// the broker (received again after the timeout), or lost with the memory driver.
	Close() error
}

// deadEntry is a dead letter as a broker stores it: the job's JSON, decoded only when needed.
type deadEntry struct {
	raw      string
	fallback string // the id of a dead letter that does not decode
}

// job decodes the dead letter; one that does not decode is kept as its raw payload under
// the fallback id.
func (e deadEntry) job() *Job {
	j, err := decodeJob([]byte(e.raw))
	if err != nil {
		j = &Job{ID: e.fallback, Payload: e.raw, Error: err.Error()}
	}
	return j
}

// idPrefix is how a job's JSON (encode) begins: the id is its first field.
const idPrefix = `{"id":"`

// id returns the dead letter's job id, read from the start of its JSON when it is laid out as
// encode lays it out (without decoding a payload of up to 1 MiB), or else decoded.
func (e deadEntry) id() string {
	if rest, ok := strings.CutPrefix(e.raw, idPrefix); ok {
		if id, _, ok := strings.Cut(rest[:min(len(rest), 100)], `"`); ok && !strings.Contains(id, `\`) {
			return id
		}
	}
	return e.job().ID
}

// walkDead walks a driver's dead letters, oldest first, until f returns false; at locates one
// in the broker (a stream entry id, a sequence).
type walkDead[K any] func(ctx context.Context, f func(at K, e deadEntry) bool) error

// findDead returns where the dead letter of job id is, or ErrNoSuchJob. It decodes only the
// one it returns.
func findDead[K any](ctx context.Context, walk walkDead[K], id string) (at K, found *Job, err error) {
	err = walk(ctx, func(k K, e deadEntry) bool {
		// One that does not decode goes by its fallback, whatever its JSON begins with.
		if e.id() == id || e.fallback == id {
			if j := e.job(); j.ID == id {
				at, found = k, j
			}
		}
		return found == nil
	})
	if err == nil && found == nil {
		err = ErrNoSuchJob
	}
	return at, found, err
}

// listDead returns up to limit dead letters, their payloads cut to maxPayload when it is
// positive, as they are read: a listing of big payloads holds only what it returns.
func listDead[K any](ctx context.Context, walk walkDead[K], limit, maxPayload int) ([]*Job, error) {
	var out []*Job
	err := walk(ctx, func(_ K, e deadEntry) bool {
		if len(out) < limit {
			j := e.job()
			j.Payload = CutPayload(j.Payload, maxPayload)
			out = append(out, j)
		}
		return len(out) < limit
	})
	return out, err
}

// CutPayload returns payload cut, when longer than max bytes (max > 0), to at most max bytes
// ending on a whole UTF-8 character, followed by "...". The result is a new string (the
// concatenation copies): it does not keep the whole payload in memory.
func CutPayload(payload string, max int) string {
	if max <= 0 || len(payload) <= max {
		return payload
	}
	n := max
	for n > 0 && !utf8.RuneStart(payload[n]) {
		n--
	}
	return payload[:n] + "..."
}

func now() int64 { return time.Now().UnixMilli() }
