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
	// Timeout is the pipeline's timeout: with ReclaimGrace, the lease of a job this server
	// holds, which Consume renews every RenewEvery.
	Timeout time.Duration
	// Prefetch is how many jobs per consumer Consume receives ahead, to wait here (their
	// leases renewed) for a free consumer; 0 receives a job only when a consumer is free.
	Prefetch int
	Logger   *slog.Logger
}

// RetryAfter is a failed attempt whose handler chose the delay before the next one (Laravel's
// release($delay)), in place of the pipeline's backoff.
type RetryAfter struct {
	Delay time.Duration
	Err   error
}

func (e *RetryAfter) Error() string { return e.Err.Error() }
func (e *RetryAfter) Unwrap() error { return e.Err }

// Handler runs one job. A nil error acknowledges it; an error wrapping ErrNotBegun gives it
// back untried; any other error is a failed attempt. A *RetryAfter sets the delay of the retry.
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
	lastAge                             atomic.Int64 // queue age of the last job begun, ms
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

// RenewEvery returns how often Consume renews the leases of the jobs it holds for a pipeline
// with timeout: a quarter of the lease (timeout + ReclaimGrace), so that three renewals may be
// late or lost before another server takes the jobs.
func RenewEvery(timeout time.Duration) time.Duration {
	return (timeout + ReclaimGrace) / 4
}

// Consume runs jobs with h on workers consumers until ctx is done; then it waits for the jobs
// that have begun, gives back those it held and had not begun, and returns.
func (p *Pipeline) Consume(ctx context.Context, workers int, h Handler) {
	p.consume(ctx, workers, make(chan struct{}, workers), h)
}

// consume is Consume with the consumers' slots given: pipelines that share consumers share
// slots (Set.Consume), so that a job begins only when a consumer is free for it.
//
// One fetcher receives jobs while this server holds fewer than workers × (1 + Prefetch) of
// them; one dispatcher takes them in the order received, waits for a free slot and starts a
// runner for each, which Starts the job, runs it and frees the slot before it settles the job
// with the broker, so that the next job begins meanwhile. Jobs begin in the order they were
// received: runners that each waited for a slot would race for it and reorder them. A renewer
// keeps the lease of every job held, waiting or running.
func (p *Pipeline) consume(ctx context.Context, workers int, slots chan struct{}, h Handler) {
	p.consumers.Add(int64(workers))
	defer p.consumers.Add(-int64(workers))
	capacity := workers * (1 + max(0, p.opts.Prefetch))
	room := make(chan struct{}, capacity) // a token per job this server may still take
	for range capacity {
		room <- struct{}{}
	}
	waiting := make(chan *Delivery, capacity) // never full: a job is received only with a token
	held := &holding{m: map[*Delivery]struct{}{}}
	settled := func(d *Delivery) {
		held.remove(d)
		room <- struct{}{}
	}

	rctx, stopRenew := context.WithCancel(context.WithoutCancel(ctx))
	renewed := make(chan struct{})
	go func() { defer close(renewed); p.renew(rctx, held) }()
	var runners sync.WaitGroup
	dispatched := make(chan struct{})
	go func() {
		defer close(dispatched)
		for d := range waiting {
			switch p.admit(ctx, d, slots) {
			case admitted:
				runners.Go(func() {
					p.run(ctx, d, slots, h)
					settled(d)
				})
			case givenBack:
				// Each in a goroutine of its own: a stop gives back every job held at
				// once, and a slow broker then costs one round trip, not one per job.
				runners.Go(func() {
					p.giveBack(ctx, d)
					settled(d)
				})
			default:
				settled(d)
			}
		}
	}()
	p.fetch(ctx, room, waiting, held)
	close(waiting)
	<-dispatched
	runners.Wait()
	stopRenew()
	<-renewed
}

// holding is the set of jobs a consume loop holds: received and not yet settled.
type holding struct {
	mu sync.Mutex
	m  map[*Delivery]struct{}
}

func (h *holding) add(d *Delivery) {
	h.mu.Lock()
	h.m[d] = struct{}{}
	h.mu.Unlock()
}

func (h *holding) remove(d *Delivery) {
	h.mu.Lock()
	delete(h.m, d)
	h.mu.Unlock()
}

func (h *holding) list() []*Delivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*Delivery, 0, len(h.m))
	for d := range h.m {
		out = append(out, d)
	}
	return out
}

// renew renews the leases of the jobs held every RenewEvery until ctx is done, and marks
// those another server took as lost.
func (p *Pipeline) renew(ctx context.Context, held *holding) {
	every := RenewEvery(p.opts.Timeout)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ds := held.list()
		if len(ds) == 0 {
			continue
		}
		c, cancel := context.WithTimeout(ctx, every)
		lost, err := p.opts.Driver.Renew(c, ds)
		cancel()
		if err != nil && ctx.Err() == nil {
			p.log.Warn("renewing the leases of the jobs held here failed; another server takes them if this lasts", "jobs", len(ds), "err", err)
		}
		for _, d := range lost {
			if !d.lost.Swap(true) {
				p.log.Warn("another server took over a job held here (this server stalled past its lease); it will not begin here", "id", d.Job.ID)
			}
		}
	}
}

// fetch receives jobs while ctx lasts and there is room for them.
func (p *Pipeline) fetch(ctx context.Context, room chan struct{}, waiting chan<- *Delivery, held *holding) {
	failures := 0
	give := func(n int) {
		for range n {
			room <- struct{}{}
		}
	}
	for ctx.Err() == nil {
		select { // room for one job at least, then all there is
		case <-room:
		case <-ctx.Done():
			return
		}
		n := 1
		for more := true; more; {
			select {
			case <-room:
				n++
			default:
				more = false
			}
		}
		resumed, pausing := p.resumed()
		select {
		case <-resumed:
		case <-ctx.Done():
			give(n)
			return
		}
		// A Pause ends the wait for a job, so that a paused pipeline takes none.
		rctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(pausing, cancel)
		ds, err := p.opts.Driver.Receive(rctx, n)
		stop()
		cancel()
		give(n - min(n, len(ds)))
		for _, d := range ds {
			held.add(d)
			waiting <- d // runners that find the pipeline paused or stopping give it back
		}
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
	}
}

// admission is what admit decided for a job held here.
type admission int

const (
	admitted       admission = iota // it has a consumer's slot: run it
	givenBack                       // the pipeline paused or is stopping: give it back
	settledAlready                  // buried, or taken over by another server
)

// admit waits for a consumer's slot for a job held here and takes it; or decides that the job
// goes back to the broker because the pipeline paused or is stopping; or buries it when its
// server died during its last attempt, or drops it when another server took it over.
func (p *Pipeline) admit(ctx context.Context, d *Delivery, slots chan struct{}) admission {
	j := d.Job
	if j.Attempt > p.opts.Retries+1 { // its server died during its last attempt
		p.settle(context.WithoutCancel(ctx), d, fmt.Errorf("its server died during its last attempt (%s)", j.Error))
		return settledAlready
	}
	for {
		// A Pause ends the wait at once (the job goes back, not once a consumer is free); a
		// Resume that came before this look is no pause at all: wait again.
		_, pausing := p.resumed()
		if ctx.Err() != nil || pausing.Err() != nil {
			return givenBack
		}
		select {
		case slots <- struct{}{}:
			switch {
			case ctx.Err() != nil || p.paused.Load():
				<-slots
				return givenBack
			case d.lost.Load():
				<-slots
				return settledAlready // its new holder settles it
			}
			return admitted
		case <-ctx.Done():
		case <-pausing.Done():
		}
	}
}

// giveBack returns a job held here and not begun to the broker.
func (p *Pipeline) giveBack(ctx context.Context, d *Delivery) {
	if err := p.opts.Driver.Release(context.WithoutCancel(ctx), d); errors.Is(err, ErrLeaseLost) {
		p.log.Warn("a job received as the pipeline paused or stopped was taken over by another server meanwhile", "id", d.Job.ID)
	} else if err != nil {
		p.log.Error("a job received as the pipeline paused or stopped could not be given back; it will run once its lease expires", "id", d.Job.ID, "err", err)
	}
}

// run begins a job admitted to a slot, runs it, frees the slot and settles the job. A job that
// has begun is settled whatever happens: ctx's end does not stop it.
func (p *Pipeline) run(ctx context.Context, d *Delivery, slots chan struct{}, h Handler) {
	bg := context.WithoutCancel(ctx)
	free := sync.OnceFunc(func() { <-slots })
	defer free()
	j := d.Job
	if err := p.opts.Driver.Start(bg, d); err != nil {
		if !errors.Is(err, ErrLeaseLost) {
			p.log.Error("a job's start could not be recorded; it will run once its lease expires", "id", j.ID, "err", err)
		}
		return
	}
	p.lastAge.Store(max(0, now()-max(j.Pushed, j.Due)))
	err := h(bg, j)
	if errors.Is(err, ErrNotBegun) {
		p.notBegun(ctx, d, err)
		return
	}
	free()
	if d.lost.Load() {
		p.log.Warn("a job ran while another server held it (this server stalled past its lease): it may run twice", "id", j.ID)
	}
	p.settle(bg, d, err)
}

// notBegunPause is how long a job no consumer could take keeps its slot before it is given
// back: the consumers are failing to boot (or stopping), and what comes next would fail too.
const notBegunPause = time.Second

// notBegun gives back a job that reached no consumer (its Start is undone: no attempt was
// made), once notBegunPause passed or ctx ended, holding the slot meanwhile so that the
// pipeline does not spin on jobs that cannot run.
func (p *Pipeline) notBegun(ctx context.Context, d *Delivery, err error) {
	p.log.Warn("no consumer could take a job; it goes back to the queue", "id", d.Job.ID, "err", err)
	select {
	case <-time.After(notBegunPause):
	case <-ctx.Done():
	}
	p.giveBack(ctx, d)
}

// settle turns the outcome of a job's attempt into its acknowledgement, its retry or its burial.
// The done, retried and dead counters count the settlements the broker took: not one another
// server made first (ErrLeaseLost), nor one that failed (the job then runs again).
func (p *Pipeline) settle(ctx context.Context, d *Delivery, err error) {
	j := d.Job
	if err == nil {
		if err := p.opts.Driver.Ack(ctx, d); p.takenOver(d, err) {
			return
		} else if err != nil {
			p.log.Error("a job ran but could not be acknowledged; it will run again", "id", j.ID, "err", err)
			return
		}
		p.done.Add(1)
		return
	}
	p.failed.Add(1)
	if j.Attempt <= p.opts.Retries {
		next := j.next(err.Error())
		delay := p.opts.Backoff << min(j.Attempt-1, 20)
		if ra := (*RetryAfter)(nil); errors.As(err, &ra) {
			delay = ra.Delay
		}
		next.Due = now() + delay.Milliseconds() // kept when due, for the queue age
		p.log.Info("job failed; retrying", "id", j.ID, "attempt", j.Attempt, "in", delay.String(), "err", err)
		if err := p.opts.Driver.Retry(ctx, d, next); p.takenOver(d, err) {
			return
		} else if err != nil {
			p.log.Error("a failed job could not be scheduled again; it will run again once its lease expires", "id", j.ID, "err", err)
			return
		}
		p.retried.Add(1)
		return
	}
	dead := *j
	dead.Error = err.Error()
	dead.Died = now()
	d.Job = &dead
	p.log.Warn("job failed its last attempt", "id", j.ID, "attempt", j.Attempt, "dead_letter", p.opts.DeadLetter, "err", err)
	if err := p.opts.Driver.Bury(ctx, d, p.opts.DeadLetter); p.takenOver(d, err) {
		return
	} else if err != nil {
		p.log.Error("a dead job could not be moved to the dead letters", "id", j.ID, "err", err)
		return
	}
	p.dead.Add(1)
}

// takenOver reports whether a settlement failed with ErrLeaseLost, and logs it: another server
// took the job over while it ran here (this one stalled past its lease) and settled or began it
// first; its settlement stands, this one changed nothing (no second retry, no second dead letter).
func (p *Pipeline) takenOver(d *Delivery, err error) bool {
	if !errors.Is(err, ErrLeaseLost) {
		return false
	}
	p.log.Warn("a job that ran here was settled by the server that took it over (this server stalled past its lease); this outcome is dropped", "id", d.Job.ID)
	return true
}

// Retry moves the pipeline's dead letters back to its queue and returns how many.
func (p *Pipeline) Retry(ctx context.Context) (int, error) {
	return p.opts.Driver.Revive(ctx)
}

// DeadLetters lists up to limit of the pipeline's dead letters, oldest first; with
// maxPayload > 0, payloads longer than that are cut (CutPayload).
func (p *Pipeline) DeadLetters(ctx context.Context, limit, maxPayload int) ([]*Job, error) {
	return p.opts.Driver.DeadLetters(ctx, limit, maxPayload)
}

// DeadLetter returns the dead letter of job id, or an error wrapping ErrNoSuchJob. The broker's
// other dead letters are read only as far as their ids.
func (p *Pipeline) DeadLetter(ctx context.Context, id string) (*Job, error) {
	j, err := p.opts.Driver.DeadLetter(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("pipeline %s, job %s: %w", p.opts.Name, id, err)
	}
	return j, nil
}

// RetryDead moves the dead letter of job id back to the queue, as a first attempt of its next
// life.
func (p *Pipeline) RetryDead(ctx context.Context, id string) error {
	if err := p.opts.Driver.ReviveOne(ctx, id); err != nil {
		return fmt.Errorf("pipeline %s, job %s: %w", p.opts.Name, id, err)
	}
	return nil
}

// DeleteDead removes the dead letter of job id.
func (p *Pipeline) DeleteDead(ctx context.Context, id string) error {
	if err := p.opts.Driver.DeleteDead(ctx, id); err != nil {
		return fmt.Errorf("pipeline %s, job %s: %w", p.opts.Name, id, err)
	}
	return nil
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
