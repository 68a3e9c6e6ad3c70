// Package pool owns the set of PHP workers a server runs: it hands requests to free workers,
// keeps the ones that find none waiting in a bounded queue, batches waiting requests onto a
// worker that frees up, and supervises the processes: restart with backoff after a crash,
// recycling on max_jobs, max_memory and exec_timeout, one-at-a-time replacement on Reset, and a
// draining Stop. It does not speak HTTP and does not encode requests: it moves frames.
package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peregrinephp/peregrine/internal/worker"
)

// Options configure a Pool. Zero values mean "no limit" where a limit is optional.
type Options struct {
	Size            int            // number of workers, at least 1
	Worker          worker.Options // how to start each worker
	MaxJobs         int            // replace a worker after this many requests; 0 = never
	MaxMemory       int64          // replace a worker whose RSS exceeds this after a batch; 0 = off
	ExecTimeout     time.Duration  // kill a worker whose request runs longer; 0 = no limit
	AllocateTimeout time.Duration  // how long a request may wait for a worker; 0 = no limit
	MaxQueue        int            // requests allowed to wait at once; 0 = no limit
	StopTimeout     time.Duration  // how long a busy worker may finish on stop or replace
	Logger          *slog.Logger
	// Observer, if set, is told about events for metrics.
	Observer Observer
}

// Observer receives pool events. Its methods are called on the request path and must be fast.
type Observer interface {
	// WorkerReplaced is called when a worker is replaced; reason is one of crash, max_jobs,
	// max_memory, exec_timeout, protocol, reset.
	WorkerReplaced(reason string)
	// Waited is called once per request that reached a worker, with the time it spent queued.
	Waited(d time.Duration)
}

// Errors returned by Do.
var (
	ErrQueueFull       = errors.New("pool: too many requests waiting for a worker (max_queue)")
	ErrAllocateTimeout = errors.New("pool: no worker became free within allocate_timeout")
	ErrStopped         = errors.New("pool: stopping")
)

// maxBatch caps how many waiting requests one worker takes at once.
const maxBatch = 16

// batchBudget is how much work, by the recent average request time, one batch may hold.
// Batching saves process wake-ups, which pays up to requests of hundreds of microseconds (a
// framework's); for slow requests it only hurts: the last of a batch waits for the others
// while later arrivals run on workers that freed up meanwhile (a worse p99).
const batchBudget = 10 * time.Millisecond

// Job states.
const (
	queued int32 = iota
	taken
	abandoned
)

type job struct {
	ctx      context.Context
	frame    []byte
	enqueued time.Time
	state    atomic.Int32
	done     chan Result
}

// Result is a worker's answer to one request.
type Result struct {
	Payload []byte // the RESPONSE payload
	PID     int    // the worker that answered or failed
	Err     error
}

// Pool is a supervised set of PHP workers. Its methods are safe for concurrent use.
type Pool struct {
	opts Options
	log  *slog.Logger
	obs  Observer

	mu       sync.Mutex
	idle     []*slot // slots waiting for work; each has an empty assign channel
	queue    []*job  // FIFO; abandoned jobs stay until popped
	head     int     // index of the queue's first job
	waiting  int     // queued jobs not abandoned
	stopping bool
	slots    []*slot

	resetMu sync.Mutex // one Reset at a time, whoever asks (SIGHUP, admin, watch)

	// avgExec is a moving average of a request's time on a worker, in nanoseconds, for the
	// batch size. Updates may race and lose one sample; it is a heuristic.
	avgExec atomic.Int64

	wg sync.WaitGroup
}

// New returns a pool; Start boots its workers.
func New(opts Options) *Pool {
	if opts.Size < 1 {
		opts.Size = 1
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Observer == nil {
		opts.Observer = nopObserver{}
	}
	return &Pool{opts: opts, log: opts.Logger, obs: opts.Observer}
}

type nopObserver struct{}

func (nopObserver) WorkerReplaced(string) {}
func (nopObserver) Waited(time.Duration)  {}

// Start boots every worker at once and waits for all of them. If one fails to boot, the others
// are stopped and the error, with PHP's own message, is returned: a script that cannot start
// should stop the server from starting. ctx bounds the boot only; Stop ends the pool.
func (p *Pool) Start(ctx context.Context) error {
	p.slots = make([]*slot, p.opts.Size)
	errs := make([]error, p.opts.Size)
	var wg sync.WaitGroup
	for i := range p.slots {
		s := &slot{p: p, id: i + 1, assign: make(chan []*job, 1), ctl: make(chan ctlMsg)}
		p.slots[i] = s
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := worker.Start(ctx, s.workerOptions())
			if err != nil {
				errs[i] = fmt.Errorf("start worker %d: %w", s.id, err)
				return
			}
			s.setWorker(w)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, s := range p.slots {
			if s.w != nil {
				s.w.Kill()
				<-s.w.Exited()
			}
		}
		return err
	}
	// Every slot starts idle, so that requests arriving the moment Start returns find a worker
	// rather than the queue.
	p.mu.Lock()
	p.idle = append(p.idle, p.slots...)
	p.mu.Unlock()
	for _, s := range p.slots {
		p.wg.Add(1)
		go s.run(true)
	}
	return nil
}

// Do queues a REQUEST frame for the next free worker and waits for its answer. The frame must
// stay untouched until Do returns. While the request waits, cancelling ctx or allocate_timeout
// removes it from the queue before it reaches PHP; once a worker has it, Do waits for the
// answer, which exec_timeout bounds.
func (p *Pool) Do(ctx context.Context, frame []byte) Result {
	j := &job{ctx: ctx, frame: frame, done: make(chan Result, 1), enqueued: time.Now()}
	p.mu.Lock()
	if p.stopping {
		p.mu.Unlock()
		return Result{Err: ErrStopped}
	}
	if n := len(p.idle); n > 0 && p.waiting == 0 {
		s := p.idle[n-1]
		p.idle = p.idle[:n-1]
		j.state.Store(taken)
		p.mu.Unlock()
		p.obs.Waited(0)
		s.assign <- []*job{j}
		return <-j.done
	}
	if p.opts.MaxQueue > 0 && p.waiting >= p.opts.MaxQueue {
		p.mu.Unlock()
		return Result{Err: ErrQueueFull}
	}
	p.queue = append(p.queue, j)
	p.waiting++
	p.mu.Unlock()

	var timeout <-chan time.Time
	if p.opts.AllocateTimeout > 0 {
		t := time.NewTimer(p.opts.AllocateTimeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case r := <-j.done:
		return r
	case <-ctx.Done():
		if p.abandon(j) {
			return Result{Err: ctx.Err()}
		}
	case <-timeout:
		if p.abandon(j) {
			return Result{Err: ErrAllocateTimeout}
		}
	}
	return <-j.done // a worker took it meanwhile; its answer is bounded by exec_timeout
}

// abandon takes a queued job back; false if a worker has taken it already.
func (p *Pool) abandon(j *job) bool {
	if !j.state.CompareAndSwap(queued, abandoned) {
		return false
	}
	p.mu.Lock()
	p.waiting--
	p.mu.Unlock()
	return true
}

// takeLocked pops up to limit live jobs, at most the slot's fair share of those waiting.
// Jobs whose client has gone are answered with their context's error and skipped.
func (p *Pool) takeLocked(limit int) []*job {
	if p.waiting == 0 {
		return nil
	}
	n := (p.waiting + len(p.slots) - 1) / len(p.slots)
	n = min(n, maxBatch, limit)
	if avg := p.avgExec.Load(); avg > 0 {
		n = max(1, min(n, int(int64(batchBudget)/avg)))
	}
	var batch []*job
	for len(batch) < n && p.head < len(p.queue) {
		j := p.queue[p.head]
		p.queue[p.head] = nil
		p.head++
		if !j.state.CompareAndSwap(queued, taken) {
			continue // abandoned; already uncounted
		}
		p.waiting--
		if err := j.ctx.Err(); err != nil {
			j.done <- Result{Err: err}
			continue
		}
		batch = append(batch, j)
	}
	if p.head == len(p.queue) {
		p.queue, p.head = p.queue[:0], 0
	} else if p.head > 1024 && p.head > len(p.queue)/2 {
		p.queue = append(p.queue[:0], p.queue[p.head:]...)
		p.head = 0
	}
	now := time.Now()
	for _, j := range batch {
		p.obs.Waited(now.Sub(j.enqueued))
	}
	return batch
}

// recordExec folds a batch's time per request into the moving average (weight 1/8).
func (p *Pool) recordExec(perRequest time.Duration) {
	old := p.avgExec.Load()
	p.avgExec.Store(old + (int64(perRequest)-old)/8)
}

// requeue puts jobs that never reached PHP back at the front of the queue, in order, and hands
// them to idle workers if there are any.
func (p *Pool) requeue(jobs []*job) {
	if len(jobs) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping {
		for _, j := range jobs {
			j.done <- Result{Err: ErrStopped}
		}
		return
	}
	front := make([]*job, 0, len(jobs)+len(p.queue)-p.head)
	for _, j := range jobs {
		j.state.Store(queued)
		front = append(front, j)
	}
	p.queue = append(front, p.queue[p.head:]...)
	p.head = 0
	p.waiting += len(jobs)
	for len(p.idle) > 0 && p.waiting > 0 {
		s := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		s.assign <- p.takeLocked(s.jobLimit())
	}
}

// leaveIdle removes s from the idle list. It returns false if a request already claimed s, in
// which case a batch is on its way to s.assign.
func (p *Pool) leaveIdle(s *slot) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, t := range p.idle {
		if t == s {
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
			return true
		}
	}
	return false
}

// Reset replaces every worker with a fresh one, one at a time: the new process boots while the
// others serve, then the old one finishes what it has and stops. A worker whose replacement
// fails to boot keeps serving, and the error says why. It returns when all are done.
func (p *Pool) Reset(ctx context.Context) error {
	p.resetMu.Lock()
	defer p.resetMu.Unlock()
	var errs []error
	for _, s := range p.slots {
		reply := make(chan error, 1)
		select {
		case s.ctl <- ctlMsg{kind: ctlReset, reply: reply}:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case err := <-reply:
			if err != nil {
				errs = append(errs, err)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return errors.Join(errs...)
}

// Stop refuses new requests, fails the ones still waiting, lets every worker finish its
// current requests for up to StopTimeout, then stops them. It returns when no process is left.
func (p *Pool) Stop() {
	p.mu.Lock()
	if p.stopping {
		p.mu.Unlock()
		p.wg.Wait()
		return
	}
	p.stopping = true
	for ; p.head < len(p.queue); p.head++ {
		if j := p.queue[p.head]; j.state.CompareAndSwap(queued, taken) {
			j.done <- Result{Err: ErrStopped}
		}
	}
	p.queue, p.head, p.waiting = nil, 0, 0
	p.mu.Unlock()
	for _, s := range p.slots {
		go func() { s.ctl <- ctlMsg{kind: ctlStop} }()
	}
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	var timeout <-chan time.Time
	if p.opts.StopTimeout > 0 {
		timeout = time.After(p.opts.StopTimeout)
	}
	select {
	case <-done:
		return
	case <-timeout:
	}
	// Some worker is still busy past stop_timeout: kill what runs so its slot can finish.
	for _, s := range p.slots {
		s.mu.Lock()
		if s.cur != nil {
			s.cur.Kill()
		}
		s.mu.Unlock()
	}
	<-done
}

// Ready reports how many workers are ready or busy (not starting, backing off or stopping).
func (p *Pool) Ready() int {
	n := 0
	for _, st := range p.Workers() {
		if st.State == StateReady || st.State == StateBusy {
			n++
		}
	}
	return n
}

// Waiting returns the number of requests waiting for a worker.
func (p *Pool) Waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiting
}

// PHPVersion returns the PHP version reported by a running worker, or "" if none runs.
func (p *Pool) PHPVersion() string {
	for _, s := range p.slots {
		s.mu.Lock()
		w := s.cur
		s.mu.Unlock()
		if w != nil {
			return w.PHPVersion()
		}
	}
	return ""
}
