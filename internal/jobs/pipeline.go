package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Pipeline: the keys of jobs.pipelines.NAME besides the driver's.
type Options struct {
	Name   string
	Driver Driver
	// Retries is how many attempts follow a failed first one.
	Retries int
	// Backoff is the delay before the first retry; each later one doubles it.
	Backoff time.Duration
	// DeadLetter keeps jobs that failed their last attempt in the dead letters; otherwise they
	// are dropped (and logged).
	DeadLetter bool
	// Timeout is the pipeline's timeout; Consume holds fewer jobs ahead when jobs take a good
	// part of it. 0 holds MaxAhead per consumer whatever the jobs' time.
	Timeout time.Duration
	Logger  *slog.Logger
}

// RetryAfter is a failed attempt whose handler chose the delay before the next one (Laravel's
// release($delay)), in place of the pipeline's backoff.
type RetryAfter struct {
	Delay time.Duration
	Err   error
}

func (e *RetryAfter) Error() string { return e.Err.Error() }
func (e *RetryAfter) Unwrap() error { return e.Err }

// Handler runs one job. A nil error acknowledges it; any other error is a failed attempt.
// A *RetryAfter sets the delay of the retry.
// ctx is not cancelled when consuming stops: a job that has begun runs to its end (or its
// handler's own timeout).
type Handler func(ctx context.Context, j *Job) error

// Pipeline is one configured queue: pushing, consuming and the counters behind its metrics.
type Pipeline struct {
	opts    Options
	log     *slog.Logger
	paused  atomic.Bool
	mu      sync.Mutex         // guards resume and pausing
	resume  chan struct{}      // closed by Resume; replaced by Pause
	pausing context.Context    // cancelled by Pause: receives in progress give up
	unpause context.CancelFunc // cancels pausing

	// Counters since this server started.
	pushed, done, failed, retried, dead atomic.Int64
	consumers                           atomic.Int64
	lastAge                             atomic.Int64 // queue age of the last job received, ms
	avgRun                              atomic.Int64 // moving average of a job's time, ns
}

// New returns a pipeline over opts.Driver, which it owns from then on.
func New(opts Options) *Pipeline {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	r := make(chan struct{})
	close(r)
	p := &Pipeline{opts: opts, log: opts.Logger.With("pipeline", opts.Name), resume: r}
	p.pausing, p.unpause = context.WithCancel(context.Background())
	return p
}

// Name returns the pipeline's name.
func (p *Pipeline) Name() string { return p.opts.Name }

// Push adds a job and returns its id once the driver has stored it. A positive delay makes it
// runnable only after that time.
func (p *Pipeline) Push(ctx context.Context, payload string, headers map[string]string, delay time.Duration) (string, error) {
	if len(payload) > MaxPayload {
		return "", fmt.Errorf("%w: %d bytes of payload, at most %d", ErrTooLarge, len(payload), MaxPayload)
	}
	size := 0
	for k, v := range headers {
		size += len(k) + len(v)
	}
	if len(headers) > MaxHeaders || size > MaxHeaderBytes {
		return "", fmt.Errorf("%w: %d headers of %d bytes, at most %d headers of %d bytes", ErrTooLarge,
			len(headers), size, MaxHeaders, MaxHeaderBytes)
	}
	t := now()
	j := &Job{ID: newID(), Pipeline: p.opts.Name, Payload: payload, Headers: headers, Attempt: 1, Pushed: t}
	if delay > 0 {
		j.Due = t + delay.Milliseconds()
	}
	if err := p.opts.Driver.Push(ctx, j); err != nil {
		return "", fmt.Errorf("push to pipeline %s: %w", p.opts.Name, err)
	}
	p.pushed.Add(1)
	return j.ID, nil
}

// Pause stops this server's consumers from receiving new jobs of the pipeline; jobs already
// running finish. Other servers on the same broker go on.
func (p *Pipeline) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused.CompareAndSwap(false, true) {
		p.resume = make(chan struct{})
		p.unpause()
	}
}

// Resume undoes Pause.
func (p *Pipeline) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused.CompareAndSwap(true, false) {
		p.pausing, p.unpause = context.WithCancel(context.Background())
		close(p.resume)
	}
}

// resumed returns a channel closed when the pipeline is not paused, and a context cancelled
// when it is paused.
func (p *Pipeline) resumed() (<-chan struct{}, context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resume, p.pausing
}

// MaxAhead is how many jobs per consumer a pipeline may hold at once: one running, the others
// received and waiting for it, so that one broker round trip brings several jobs and the
// consumer never waits for the broker.
const MaxAhead = 8

// Consume runs jobs with h for workers consumers until ctx is done; then it waits for the jobs
// that have begun and returns. One fetcher receives jobs for them all, several per round trip,
// at most MaxAhead per consumer, and fewer when jobs are slow: the jobs waiting here for a
// consumer should wait no more than a quarter of the timeout, after which another server
// could take them for jobs of a dead one.
func (p *Pipeline) Consume(ctx context.Context, workers int, h Handler) {
	p.consumers.Add(int64(workers))
	defer p.consumers.Add(-int64(workers))
	n := workers * MaxAhead
	deliveries := make(chan *Delivery)
	free := make(chan struct{}, n) // a token per runner that finished a job
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for d := range deliveries {
				p.run(context.WithoutCancel(ctx), d, h)
				free <- struct{}{}
			}
		})
	}
	p.fetch(ctx, workers, n, free, deliveries)
	close(deliveries)
	wg.Wait()
}

// ahead returns how many jobs the pipeline may hold for workers consumers: enough for a
// quarter of the timeout at the average job time, between workers and n.
func (p *Pipeline) ahead(workers, n int) int {
	avg := time.Duration(p.avgRun.Load())
	if avg <= 0 || p.opts.Timeout <= 0 {
		return n
	}
	return min(n, workers*(1+int(min(p.opts.Timeout/4/avg, time.Duration(n)))))
}

// recordRun adds a job's time to the moving average over about 8 jobs. The first job seeds
// it, and no update is lost: runners finish together, and an average left near zero by a
// batch of lost updates would let the next fetch take a full batch of slow jobs.
func (p *Pipeline) recordRun(took time.Duration) {
	for {
		avg := p.avgRun.Load()
		next := int64(took)
		if avg > 0 {
			next = avg + (next-avg)/8
		}
		if p.avgRun.CompareAndSwap(avg, max(next, 1)) {
			return
		}
	}
}

// fetch receives jobs for the n runners while ctx lasts.
func (p *Pipeline) fetch(ctx context.Context, workers, n int, free <-chan struct{}, deliveries chan<- *Delivery) {
	failures := 0
	idle := n // runners without a job
	for ctx.Err() == nil {
		for idle == 0 || n-idle >= p.ahead(workers, n) { // held enough: wait for runners to finish
			select {
			case <-free:
				idle++
			case <-ctx.Done():
				return
			}
		}
		for more := true; more; {
			select {
			case <-free:
				idle++
			default:
				more = false
			}
		}
		resumed, pausing := p.resumed()
		select {
		case <-resumed:
		case <-ctx.Done():
			return
		}
		// A Pause ends the wait for a job, so that a paused pipeline takes none.
		rctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(pausing, cancel)
		ds, err := p.opts.Driver.Receive(rctx, min(idle, max(1, p.ahead(workers, n)-(n-idle))))
		stop()
		cancel()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, ErrClosed) {
				return
			}
			if pausing.Err() != nil {
				continue
			}
			failures++
			wait := min(time.Duration(failures)*100*time.Millisecond, 5*time.Second)
			p.log.Warn("receiving jobs failed; retrying", "err", err, "in", wait.String())
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
			continue
		}
		failures = 0
		for _, d := range ds {
			if pausing.Err() != nil || ctx.Err() != nil { // a receive a pause or the stop could not interrupt
				if err := p.opts.Driver.Release(context.WithoutCancel(ctx), d); err != nil {
					p.log.Error("a job received as the pipeline paused or stopped could not be given back; it will run after the timeout", "id", d.Job.ID, "err", err)
				}
				continue
			}
			deliveries <- d // a runner is idle: it takes it at once
			idle--
		}
	}
}

// run runs one delivery and settles it with the driver.
func (p *Pipeline) run(ctx context.Context, d *Delivery, h Handler) {
	j := d.Job
	p.lastAge.Store(max(0, now()-max(j.Pushed, j.Due)))
	var err error
	if j.Attempt > p.opts.Retries+1 {
		err = fmt.Errorf("its server died during its last attempt (%s)", j.Error)
	} else {
		start := time.Now()
		err = h(ctx, j)
		p.recordRun(time.Since(start))
	}
	if err == nil {
		p.done.Add(1)
		if err := p.opts.Driver.Ack(ctx, d); err != nil {
			p.log.Error("a job ran but could not be acknowledged; it will run again", "id", j.ID, "err", err)
		}
		return
	}
	p.failed.Add(1)
	if j.Attempt <= p.opts.Retries {
		next := j.next(err.Error())
		delay := p.opts.Backoff << min(j.Attempt-1, 20)
		if ra := (*RetryAfter)(nil); errors.As(err, &ra) {
			delay = ra.Delay
		}
		if delay > 0 {
			next.Due = now() + delay.Milliseconds()
		}
		p.retried.Add(1)
		p.log.Info("job failed; retrying", "id", j.ID, "attempt", j.Attempt, "in", delay.String(), "err", err)
		if err := p.opts.Driver.Retry(ctx, d, next); err != nil {
			p.log.Error("a failed job could not be scheduled again; it will run again after the timeout", "id", j.ID, "err", err)
		}
		return
	}
	p.dead.Add(1)
	dead := *j
	dead.Error = err.Error()
	d.Job = &dead
	p.log.Warn("job failed its last attempt", "id", j.ID, "attempt", j.Attempt, "dead_letter", p.opts.DeadLetter, "err", err)
	if err := p.opts.Driver.Bury(ctx, d, p.opts.DeadLetter); err != nil {
		p.log.Error("a dead job could not be moved to the dead letters", "id", j.ID, "err", err)
	}
}

// Retry moves the pipeline's dead letters back to its queue and returns how many.
func (p *Pipeline) Retry(ctx context.Context) (int, error) {
	return p.opts.Driver.Revive(ctx)
}

// Status is a pipeline's state for peregrine jobs and the metrics.
type Status struct {
	Name      string `json:"name"`
	Driver    string `json:"driver"`
	Paused    bool   `json:"paused"`
	Stats            // the broker's view, every server's jobs
	Consumers int64  `json:"consumers"` // this server's consume loops
	// Counters of this server since it started.
	Pushed       int64 `json:"pushed"`
	Done         int64 `json:"done"`
	Failed       int64 `json:"failed"`
	Retried      int64 `json:"retried"`
	DeadLettered int64 `json:"dead_lettered"`
	// QueueAge is how long the last job received had waited since it was due, in seconds.
	QueueAge float64 `json:"queue_age_seconds"`
	// Error says why the broker could not be asked for Stats.
	Error string `json:"error,omitempty"`
}

// Status reports the pipeline's state; driver names the driver for the listing.
func (p *Pipeline) Status(ctx context.Context, driver string) Status {
	s := Status{Name: p.opts.Name, Driver: driver, Paused: p.paused.Load(), Consumers: p.consumers.Load(),
		Pushed: p.pushed.Load(), Done: p.done.Load(), Failed: p.failed.Load(), Retried: p.retried.Load(),
		DeadLettered: p.dead.Load(), QueueAge: float64(p.lastAge.Load()) / 1000}
	st, err := p.opts.Driver.Stats(ctx)
	if err != nil {
		s.Error = err.Error()
	}
	s.Stats = st
	return s
}

// Close closes the driver.
func (p *Pipeline) Close() error { return p.opts.Driver.Close() }
