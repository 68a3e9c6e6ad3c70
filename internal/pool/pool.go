// Package pool owns the set of PHP workers a server runs: it hands requests to free workers,
// keeps the ones that find none waiting in a bounded queue, lets a request that receives a
// worker take waiting requests along in one write (batching), and supervises the processes:
// restart with backoff after a crash, recycling on max_jobs, max_memory and exec_timeout,
// one-at-a-time replacement on Reset (in direct mode, the old workers draining in the
// background), and a draining Stop. It does not speak HTTP and does not
// encode requests: it moves worker.Calls, and says in an *Error which HTTP status a failure
// deserves.
//
// The pool starts workers with worker.Start and the options it was given; with a
// worker.Template among them (workers.fork) they are forked from it, and Reset renews the
// template before it replaces the first worker. The template belongs to whoever created it.
//
// The goroutine of the request that gets a worker runs the exchange itself (worker.Exchange.Run,
// one path at every concurrency), as net/http runs a handler on its connection's goroutine: a
// request that finds a worker free crosses no goroutine at all at concurrency 1, and one that
// waits is woken once. What became of each request of a batch is what the worker said
// (worker.Outcome): the pool retries the unread ones and fails the ones PHP may have begun, and
// never does index arithmetic to guess. A slot has room for workers.concurrency requests (at 1,
// one batch) and gets each back when it ended (DONE), not merely answered, so work PHP does after
// answering (fastcgi_finish_request()) is never overlapped with the next request at concurrency
// 1. A supervisor goroutine per slot does the slow parts: booting, stopping and replacing
// processes.
//
// Every slot lives by one state machine, guarded by Pool.mu:
//
//	          boot ok               Do takes it            requests ended
//	starting ────────> ready ─────────────────────> busy ───────────────> ready
//	  ^  │               │                            │
//	  │  │ boot fails    │ exits, Reset, Stop         │ fails, says it exits, max_jobs,
//	  │  v               v                            v  max_memory, Reset or Stop pending
//	backoff          stopping <───────────────────────┘
//	  ^                  │ process gone
//	  └──────────────────┴──> starting (a fresh worker), or the slot ends on Stop
//
// A Reset boots the new worker beside the old one (the slot stays ready or busy meanwhile) and
// puts it in the slot as ready. Proxied (the slot's "Reset" above), the old worker goes through
// stopping first: it ends its requests and gets stop_timeout to exit. In direct mode
// (Options.SelfRetiring), where the workers serve their own connections, the old one leaves
// the slot at once and drains beside it, as a worker of no slot:
//
//	ready (old) ── Reset, new worker booted ──> ready (new)      old: draining ──> gone
//	                                                               (its own limits; Stop's budget)
//
// Reset then goes on to the next slot without waiting, and returns once every old worker has
// exited, so that a reset with idle connections on N workers takes one drain, not N. The next
// Reset ends what is left of them after stop_timeout (cutDrains).
package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peregrinephp/peregrine/internal/worker"
)

// Options configure a Pool. Zero values mean "no limit" where a limit is optional.
type Options struct {
	Size            int            // number of workers, at least 1
	Concurrency     int            // requests one worker runs at once (workers.concurrency); 0 or 1: one
	Worker          worker.Options // how to start each worker
	MaxJobs         int            // replace a worker after this many requests; 0 = never
	MaxMemory       int64          // replace a worker whose RSS exceeds this after a request; 0 = off
	ExecTimeout     time.Duration  // kill a worker whose request runs longer; 0 = no limit
	AllocateTimeout time.Duration  // how long a request may wait for a worker; 0 = no limit
	MaxQueue        int            // requests allowed to wait at once; 0 = no limit
	StopTimeout     time.Duration  // how long a busy worker may finish when it is replaced
	CancelGrace     time.Duration  // how long a request told to cancel may take to end before its worker is killed; 0 = 1 s
	// SelfRetiring says the workers serve clients without the pool (direct mode) and leave by
	// themselves after their max_jobs or max_memory: an idle worker's clean exit is then a
	// retirement, replaced at once, not a crash that counts towards backoff.
	SelfRetiring bool
	Logger       *slog.Logger
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
	// Batched is called once per group of queued requests handed to a worker together, with
	// their number.
	Batched(n int)
}

// Error is a request the pool could not have answered. Status is the HTTP status that says why:
// 503 when no worker could take it (RetryAfter set), 502 when its worker failed, 504 when it
// ran past exec_timeout, 500 when it hit a fatal error in PHP that ended its concurrent worker.
type Error struct {
	Status     int
	RetryAfter bool
	Err        error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Errors wrapped by *Error.
var (
	ErrQueueFull       = errors.New("pool: too many requests waiting for a worker (max_queue)")
	ErrAllocateTimeout = errors.New("pool: no worker became free within allocate_timeout")
	ErrStopped         = errors.New("pool: stopping")
	ErrNoWorker        = errors.New("pool: no worker can run: every one failed to boot and is retrying")
)

func unavailable(err error) error {
	return &Error{Status: http.StatusServiceUnavailable, RetryAfter: true, Err: err}
}

// failed wraps what worker.Exec reported for a request.
func failed(err error) error {
	switch {
	case errors.Is(err, worker.ErrExecTimeout):
		return &Error{Status: http.StatusGatewayTimeout, Err: err}
	case errors.Is(err, worker.ErrFatal):
		return &Error{Status: http.StatusInternalServerError, Err: err}
	}
	return &Error{Status: http.StatusBadGateway, Err: err}
}

// maxBatch caps how many waiting requests one worker takes at once.
const maxBatch = 16

// batchBudget is how much work, by the recent average request time, one batch may hold.
// Batching saves process wake-ups, which pays up to requests of hundreds of microseconds (a
// framework's); for slow requests it only hurts: the last of a batch waits for the others
// while later arrivals run on workers that freed up meanwhile (a worse p99).
const batchBudget = 10 * time.Millisecond

// Waiter states, under Pool.mu.
const (
	queued    = iota // in the queue
	abandoned        // left the queue (client gone, allocate_timeout); still in the slice
	running          // granted a slot: its goroutine runs the exchange
	member           // in another request's batch
	finished         // answered or failed by someone else
)

// A waiter is one request on its way to a worker.
type waiter struct {
	ctx      context.Context
	call     *worker.Call
	enqueued time.Time
	ready    chan struct{} // signalled once per grant or finish

	// Under Pool.mu; read by the waiter's goroutine after ready.
	state int
	slot  *slot     // set with running: the slot to run batch on
	batch []*waiter // the batch, this waiter first
	err   error     // set with finished
	pid   int
}

// Pool is a supervised set of PHP workers. Its methods are safe for concurrent use.
type Pool struct {
	opts atomic.Pointer[Options] // o() reads them; SetOptions replaces them
	log  *slog.Logger
	obs  Observer

	// life is cancelled when Stop's budget runs out: it kills what still runs.
	life context.Context
	kill context.CancelFunc

	mu       sync.Mutex
	idle     []*slot   // ready slots, most recently used last
	queue    []*waiter // FIFO from head; abandoned waiters stay until popped
	head     int
	waiting  int // queued waiters
	stopping bool
	stopped  chan struct{} // closed by Stop: supervisors wind down
	stopCtx  context.Context
	slots    []*slot
	drains   []*drain // old workers draining after a reset in direct mode (slot.go)

	resetMu sync.Mutex // one Reset at a time, whoever asks (SIGHUP, admin, watch)

	// avgExec is a moving average of a request's time on a worker, in nanoseconds, for the
	// batch size. Updates may race and lose one sample; it is a heuristic.
	avgExec atomic.Int64
	budget  time.Duration // batchBudget; tests raise it to batch whatever the request time

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
	life, kill := context.WithCancel(context.Background())
	p := &Pool{log: opts.Logger, obs: opts.Observer, life: life, kill: kill, stopped: make(chan struct{}), budget: batchBudget}
	p.opts.Store(&opts)
	return p
}

// o returns the pool's options in force; SetOptions replaces them as a whole.
func (p *Pool) o() *Options { return p.opts.Load() }

// SetOptions replaces the options of a running pool (a config reload): limits and timeouts
// apply to requests from now on, and the worker options to workers started from now on (and to
// the worker template's next process), so a Reset after it puts every worker on them. The number of workers and their concurrency
// cannot change while the pool runs: it returns an error naming the key, and nothing changes.
// The logger and the observer stay the pool's own.
func (p *Pool) SetOptions(o Options) error {
	cur := p.o()
	if o.Size < 1 {
		o.Size = 1
	}
	if o.Size != cur.Size {
		return fmt.Errorf("workers.count: the number of workers (%d, now %d) changes only with a restart", cur.Size, o.Size)
	}
	if max(o.Concurrency, 1) != max(cur.Concurrency, 1) {
		return fmt.Errorf("workers.concurrency (%d, now %d) changes only with a restart", max(cur.Concurrency, 1), max(o.Concurrency, 1))
	}
	o.Logger, o.Observer = cur.Logger, cur.Observer
	if t := o.Worker.Template; t != nil {
		t.Configure(o.Worker) // the next Renew starts the template, and so the workers, on them
	}
	p.opts.Store(&o)
	return nil
}

type nopObserver struct{}

func (nopObserver) WorkerReplaced(string) {}
func (nopObserver) Waited(time.Duration)  {}
func (nopObserver) Batched(int)           {}

// Start boots every worker at once and waits for all of them. If one fails to boot, the others
// are killed and the error, with PHP's own message, is returned: a script that cannot start
// should stop the server from starting. ctx bounds the boot only; Stop ends the pool.
func (p *Pool) Start(ctx context.Context) error {
	p.slots = make([]*slot, p.o().Size)
	workers := make([]*worker.Worker, p.o().Size)
	errs := make([]error, p.o().Size)
	var wg sync.WaitGroup
	for i := range p.slots {
		s := &slot{id: i + 1, state: StateStarting, retire: make(chan retirement, 1), ctl: make(chan ctlMsg)}
		p.slots[i] = s
		wg.Add(1)
		go func() {
			defer wg.Done()
			workers[i], errs[i] = worker.Start(ctx, p.workerOptions(s))
			if errs[i] != nil {
				errs[i] = fmt.Errorf("start worker %d: %w", s.id, errs[i])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, w := range workers {
			if w != nil {
				w.Kill()
				<-w.Exited()
			}
		}
		return err
	}
	for i, s := range p.slots {
		p.publish(s, workers[i])
		p.wg.Add(1)
		go p.supervise(s, workers[i])
	}
	return nil
}

// Do runs call on the next free worker and returns the pid of the worker that answered or
// failed. call.Owner's Release is called once no worker reads call's Frame or Body any more:
// before Do returns, or after it, when the answer was complete while PHP still read the request
// (its work after fastcgi_finish_request()); the caller must not touch them after Do is called. While the request waits, cancelling ctx or allocate_timeout takes it out of the queue
// before it reaches PHP (ctx's error, or an *Error); once a worker has it, the answer goes to
// call.Answer and exec_timeout bounds it. A failure is an *Error, except ctx's own error for a
// request whose client left before it reached PHP.
func (p *Pool) Do(ctx context.Context, call *worker.Call) (pid int, err error) {
	// The pool holds the call's bytes while it has the call, across every exchange it is
	// written in (one that was not read is written again); the exchanges hold them past Do's
	// return when PHP still reads them (worker.Call says who owns a request's bytes).
	call.Hold()
	defer call.Drop()
	w := &waiter{ctx: ctx, call: call, enqueued: time.Now()}
	p.mu.Lock()
	switch n := len(p.idle); {
	case p.stopping:
		p.mu.Unlock()
		return 0, unavailable(ErrStopped)
	case n == 0 && p.allFailingLocked():
		p.mu.Unlock()
		return 0, unavailable(ErrNoWorker)
	case n > 0 && p.waiting == 0:
		s := p.pickLocked()
		p.grantLocked(s, 1)
		w.state = running
		p.mu.Unlock()
		p.obs.Waited(0)
		if retry := p.run(s, []*waiter{w}); !retry {
			return w.pid, w.err
		}
		// Nothing of it reached PHP: run put it back in the queue, first.
	case p.o().MaxQueue > 0 && p.waiting >= p.o().MaxQueue:
		p.mu.Unlock()
		return 0, unavailable(ErrQueueFull)
	default:
		w.ready = make(chan struct{}, 1)
		p.enqueueLocked(w)
		p.dispatchLocked()
		p.mu.Unlock()
	}

	var timeout <-chan time.Time
	if p.o().AllocateTimeout > 0 {
		t := time.NewTimer(p.o().AllocateTimeout)
		defer t.Stop()
		timeout = t.C
	}
	for {
		select {
		case <-w.ready:
		case <-ctx.Done():
			if p.abandon(w) {
				return 0, ctx.Err()
			}
			ctx, timeout = context.Background(), nil // taken meanwhile: see it through
			continue
		case <-timeout:
			if p.abandon(w) {
				return 0, unavailable(ErrAllocateTimeout)
			}
			timeout = nil
			continue
		}
		p.mu.Lock()
		state, s, batch := w.state, w.slot, w.batch
		p.mu.Unlock()
		if state != running {
			return w.pid, w.err
		}
		if retry := p.run(s, batch); !retry {
			return w.pid, w.err
		}
		// Nothing of it reached PHP: it is back in the queue, first.
	}
}

// allFailingLocked reports whether every slot's last boot failed: a request would most likely wait
// its whole allocate_timeout for nothing.
func (p *Pool) allFailingLocked() bool {
	for _, s := range p.slots {
		if !s.failing {
			return false
		}
	}
	return len(p.slots) > 0
}

// failQueueLocked answers every queued request with err.
func (p *Pool) failQueueLocked(err error) {
	for ; p.head < len(p.queue); p.head++ {
		w := p.queue[p.head]
		p.queue[p.head] = nil
		if w.state == queued {
			p.waiting--
			p.finishLocked(w, 0, err)
		}
	}
	p.queue, p.head = p.queue[:0], 0
}

// abandon takes a queued waiter out of the queue; false if a worker has it already.
func (p *Pool) abandon(w *waiter) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.state != queued {
		return false
	}
	w.state = abandoned
	p.waiting--
	return true
}

func (p *Pool) enqueueLocked(w *waiter) {
	w.state = queued
	p.queue = append(p.queue, w)
	p.waiting++
}

// requeueLocked puts a waiter whose request never reached PHP back in the queue: behind after
// when that one still waits at the front, else first.
func (p *Pool) requeueLocked(w *waiter, after *waiter) {
	if w.ready == nil {
		w.ready = make(chan struct{}, 1)
	}
	w.state = queued
	if p.stopping {
		p.finishLocked(w, 0, unavailable(ErrStopped))
		return
	}
	at := p.head
	if after != nil && after.state == queued {
		for i := p.head; i < len(p.queue); i++ {
			if p.queue[i] == after {
				at = i + 1
				break
			}
		}
	}
	if at == p.head && p.head > 0 {
		p.head--
		p.queue[p.head] = w
	} else {
		p.queue = slices.Insert(p.queue, at, w)
	}
	p.waiting++
}

// finishLocked gives w its result and wakes its goroutine, unless it is the goroutine running
// the batch, which reads its own result.
func (p *Pool) finishLocked(w *waiter, pid int, err error) {
	w.pid, w.err = pid, err
	if w.state == running {
		return
	}
	w.state = finished
	w.ready <- struct{}{}
}

// dispatchLocked hands ready slots to waiting requests while there are both. A slot goes to the
// first waiter, with a batch that holds at least that waiter: a grant is never empty.
func (p *Pool) dispatchLocked() {
	for len(p.idle) > 0 && p.waiting > 0 {
		s := p.pickLocked()
		batch := p.takeLocked(s)
		p.grantLocked(s, len(batch))
		first := batch[0]
		first.state, first.slot, first.batch = running, s, batch
		first.ready <- struct{}{}
	}
}

// takeLocked pops the next queued waiter and, behind it, the slot's fair share of the others
// (at most maxBatch, the batch budget, the slot's max_jobs and one pipe buffer of frames; a
// request with a body of its own goes alone). The caller has checked that p.waiting > 0.
func (p *Pool) takeLocked(s *slot) []*waiter {
	n := (p.waiting + len(p.slots) - 1) / len(p.slots)
	n = min(n, maxBatch, p.jobLimitLocked(s))
	if p.concurrency() > 1 {
		n = 1 // a concurrent worker takes each request as it comes: no batch to wait for
	}
	if avg := p.avgExec.Load(); avg > 0 {
		n = max(1, min(n, int(int64(p.budget)/avg)))
	}
	var batch []*waiter
	size := 0
	now := time.Now()
	for p.head < len(p.queue) && len(batch) < n {
		w := p.queue[p.head]
		if w.state != queued {
			p.queue[p.head] = nil
			p.head++
			continue
		}
		if len(batch) > 0 && (w.call.Body != nil || size+len(w.call.Frame) > worker.PipeBuffer) {
			break
		}
		p.queue[p.head] = nil
		p.head++
		p.waiting--
		w.state = member
		batch = append(batch, w)
		size += len(w.call.Frame)
		p.obs.Waited(now.Sub(w.enqueued))
		if w.call.Body != nil {
			break
		}
	}
	if p.head == len(p.queue) {
		p.queue, p.head = p.queue[:0], 0
	} else if p.head > 1024 && p.head > len(p.queue)/2 {
		p.queue = append(p.queue[:0], p.queue[p.head:]...)
		p.head = 0
	}
	p.obs.Batched(len(batch))
	return batch
}

// run runs a batch on slot s, from the goroutine of its first waiter, over the slot's
// exchange: one path for every concurrency (at 1 a batch of waiting requests in one write, above
// 1 one request). It reports whether that first waiter must wait again: its request never
// reached PHP. Each other request of the batch gets its result as soon as its outcome is known
// (settled); the first returns as soon as its own is, even while the worker still works (after
// fastcgi_finish_request(), on the rest of the batch). The slot's capacity comes back request by
// request as the worker says they ended (ended).
func (p *Pool) run(s *slot, batch []*waiter) (retry bool) {
	self := batch[0]
	// Requests whose client left before they reached PHP are dropped here.
	live := make([]*waiter, 0, len(batch))
	p.mu.Lock()
	x, pid := s.x, s.w.PID() // the slot may hold another worker by the time they end
	for _, w := range batch {
		if err := w.ctx.Err(); err != nil {
			p.finishLocked(w, 0, err)
			continue
		}
		live = append(live, w)
	}
	p.mu.Unlock()
	for range len(batch) - len(live) {
		p.ended(s, x, nil) // never written
	}
	if len(live) == 0 {
		return false
	}
	calls := make([]*worker.Call, len(live))
	lead := -1
	for i, l := range live {
		calls[i] = l.call
		if l == self {
			lead = i
		}
	}
	// Each request is settled as soon as its outcome is known, before the slot's capacity comes
	// back: one to run again is back in the queue first.
	var requeued *waiter // the last of the batch put back, which the next goes behind
	settled := func(i int) {
		l := live[i]
		if l == self && l.call.Outcome != worker.Unread {
			return // its own goroutine reads it when Run returns, without the lock
		}
		p.mu.Lock()
		if p.settleLocked(l, pid, requeued) {
			requeued = l
		}
		p.mu.Unlock()
	}
	start := time.Now()
	x.Run(self.ctx, calls, p.o().ExecTimeout, lead, settled)
	if lead < 0 {
		return false
	}
	switch self.call.Outcome {
	case worker.Answered:
		p.recordExec(time.Since(start))
		self.pid = pid
	case worker.Failed:
		self.pid, self.err = pid, callError(self)
	case worker.Unread:
		return true // settled put it back in the queue
	}
	return false
}

// settleLocked gives w its result by the outcome the worker reported: answered or failed, or,
// unread, back in the queue (true): at its front, or behind after, a request of its batch put
// back before it that still waits there, so that a batch goes back in its order.
func (p *Pool) settleLocked(w *waiter, pid int, after *waiter) (requeued bool) {
	switch w.call.Outcome {
	case worker.Answered:
		p.finishLocked(w, pid, nil)
	case worker.Failed:
		p.finishLocked(w, pid, callError(w))
	case worker.Unread:
		p.requeueLocked(w, after)
		return true
	}
	return false
}

// callError is what a failed call's client gets: its own context's error when it left while PHP
// answered (nobody to answer, nothing to report), else the worker's failure.
func callError(w *waiter) error {
	if err := w.ctx.Err(); err != nil && errors.Is(w.call.Err, worker.ErrAbandoned) {
		return err
	}
	return failed(w.call.Err)
}

// recordExec folds a batch's time per request into the moving average (weight 1/8).
func (p *Pool) recordExec(perRequest time.Duration) {
	old := p.avgExec.Load()
	p.avgExec.Store(old + (int64(perRequest)-old)/8)
}

// Reset replaces every worker with a fresh one, one at a time: the new process boots while the
// others serve, then the old one finishes what it has and stops. A worker whose replacement
// fails to boot keeps serving, and the error says why. With workers forked from a template, the
// template is renewed first, so that the new workers see new code; if the new template cannot
// start, no worker is replaced. In direct mode (Options.SelfRetiring) each old worker drains in
// the background while the next slot is replaced. It returns when all are done (every old
// worker gone), or when ctx is done. The next Reset gives the drains still running
// stop_timeout, then kills them, so that old workers never pile up and a slow client of an old
// worker holds back no later reset for longer than that.
func (p *Pool) Reset(ctx context.Context) error {
	errs, err := p.replaceAll(ctx)
	if err != nil {
		return err
	}
	// Outside resetMu: a client that trickles an upload to a draining worker holds back this
	// call, never the next Reset, which cuts what is left of this one's drains (cutDrains).
	if err := p.awaitDrains(ctx); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// replaceAll is Reset's work under resetMu: an earlier reset's drains cut, the template
// renewed, each slot's worker replaced.
func (p *Pool) replaceAll(ctx context.Context) ([]error, error) {
	p.resetMu.Lock()
	defer p.resetMu.Unlock()
	if err := p.cutDrains(ctx); err != nil {
		return nil, err
	}
	if t := p.o().Worker.Template; t != nil {
		if err := t.Renew(ctx); err != nil {
			p.log.Error("workers not replaced: the new worker template failed to start", "err", err)
			return nil, fmt.Errorf("renew the worker template: %w", err)
		}
	}
	var errs []error
	for _, s := range p.slots {
		reply := make(chan error, 1)
		select {
		case s.ctl <- ctlMsg{ctx: ctx, reply: reply}:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-p.stopped:
			return nil, ErrStopped
		}
		select {
		case err := <-reply:
			if err != nil {
				errs = append(errs, err)
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return errs, nil
}

// Stop refuses new requests, fails the ones still waiting, lets every busy worker finish its
// request until ctx is done, then kills what still runs. It returns when no process is left.
func (p *Pool) Stop(ctx context.Context) {
	p.mu.Lock()
	if p.stopping {
		p.mu.Unlock()
		p.wg.Wait()
		return
	}
	p.stopping = true
	p.stopCtx = ctx
	for ; p.head < len(p.queue); p.head++ {
		if w := p.queue[p.head]; w.state == queued {
			p.finishLocked(w, 0, unavailable(ErrStopped))
		}
	}
	p.queue, p.head, p.waiting = nil, 0, 0
	close(p.stopped)
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		p.kill() // ends the exchanges still running: their workers are killed
		<-done
	}
	p.kill()
}

// Ready reports how many workers are ready or busy (not starting, backing off, stopping or
// draining).
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

// Admit reports whether a new request would be let in now rather than refused with 503, so that
// a request body is not read for nothing. It reserves nothing.
func (p *Pool) Admit() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.stopping:
		return unavailable(ErrStopped)
	case p.o().MaxQueue > 0 && p.waiting >= p.o().MaxQueue && len(p.idle) == 0:
		return unavailable(ErrQueueFull)
	}
	return nil
}

// PHPVersion returns the PHP version reported by a running worker, or "" if none runs.
func (p *Pool) PHPVersion() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.slots {
		if s.w != nil {
			return s.w.PHPVersion()
		}
	}
	return ""
}
