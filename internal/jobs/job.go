// Package jobs owns background jobs: pipelines (jobs.pipelines), the drivers that keep their
// queues (memory, in this server; redis, Redis Streams with a consumer group; nats, a JetStream
// stream with a durable pull consumer), and the consume loop that hands each due job to a
// handler and turns its outcome into an acknowledgement, a retry after a backoff or a dead
// letter. It knows nothing of PHP or of the worker pool: the daemon gives Consume a Handler
// that runs the job on a consumer worker.
//
// A job's life, whatever the driver:
//
//	Push ──delay?──> delayed ──due──> queued ──Receive──> running ──handler ok──> acked (gone)
//	                    ^                                   │  │
//	                    │         attempt <= retries        │  │ attempt > retries
//	                    └────────── Retry (backoff) <───────┘  └──> dead (dead_letter) or dropped
//	    server dies while running: after timeout another server receives it again (attempt + 1)
//
// Delivery is at least once: a job is removed only after its handler returned; a job whose
// server died is received again by another server once its timeout has passed, and counts as
// an attempt.
package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
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
	// Error is why the previous attempt failed; empty on the first.
	Error string `json:"error,omitempty"`
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
}

// Stats are what a driver knows of its queue. On a shared broker they count every server's jobs.
type Stats struct {
	Queued  int64 `json:"queued"`  // waiting to be received
	Delayed int64 `json:"delayed"` // waiting for their time (delay or backoff)
	Running int64 `json:"running"` // received and not yet acknowledged
	Dead    int64 `json:"dead"`    // in the dead letters
}

// Driver keeps a pipeline's queue. Its methods are safe for concurrent use. Every method that
// changes the queue returns only once the broker has stored the change.
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
	// Release gives back a job received but not run (its pipeline was paused meanwhile), as
	// runnable at once and without counting an attempt.
	Release(ctx context.Context, d *Delivery) error
	// Revive moves every dead letter back to the queue as a first attempt; it returns how many.
	Revive(ctx context.Context) (int, error)
	// Stats reports the queue's sizes.
	Stats(ctx context.Context) (Stats, error)
	// Close releases the driver's connections; jobs it had received and not settled are left to
	// the broker (received again after the timeout), or lost with the memory driver.
	Close() error
}

func now() int64 { return time.Now().UnixMilli() }
