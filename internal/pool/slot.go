package pool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/peregrinephp/peregrine/internal/worker"
)

// State is what a worker slot is doing, as shown by Workers; the package doc draws how a slot
// moves between them.
type State string

// Slot states.
const (
	StateStarting State = "starting"
	StateReady    State = "ready"
	StateBusy     State = "busy"
	StateBackoff  State = "backoff"
	StateStopping State = "stopping"
	// StateDraining is an old worker a reset took out of its slot in direct mode
	// (Options.SelfRetiring): a new worker serves the slot already, and the old one finishes
	// what it serves before it exits. Workers lists it after the slots.
	StateDraining State = "draining"
)

// A retirement is why a busy slot's worker must go, sent by the request goroutine that releases
// it to the slot's supervisor.
type retirement struct {
	reason string
	err    error // the failure, when the process is dead or killed; nil for a healthy worker
}

type ctlMsg struct {
	ctx   context.Context
	reply chan error
}

// slot is one place in the pool, filled by one worker process at a time.
type slot struct {
	id     int
	retire chan retirement // cap 1: at most one release waits to be read
	ctl    chan ctlMsg     // Reset's requests to the supervisor

	// Under Pool.mu.
	state     State
	w         *worker.Worker
	jobs      int    // requests the current worker has answered
	want      string // a reason to retire the worker once its request is done (reset, stop)
	busySince time.Time
	started   time.Time
	failing   bool // its last boot failed: no worker since

	x        *worker.Exchange // the worker's: every request runs through it
	inflight int              // its requests granted and not yet ended (DONE), a batch's each
	retiring *retirement      // why it must go once inflight is 0
}

// WorkerInfo describes one worker slot at a moment.
type WorkerInfo struct {
	Slot     int       `json:"slot"`
	PID      int       `json:"pid"`
	State    State     `json:"state"`
	Requests int64     `json:"requests"` // answered by the current process
	Started  time.Time `json:"started"`  // when the current process started
	// BusySince is when the current request started; zero when not busy.
	BusySince time.Time `json:"busy_since,omitzero"`
	// InFlight is how many requests a concurrent worker runs now.
	InFlight int `json:"in_flight,omitempty"`
	// Group names the pool a worker belongs to where a listing merges several (the daemon's
	// WebSocket event workers of direct mode: "websocket"); empty for the server's own workers.
	Group string `json:"group,omitempty"`
}

// Workers returns a snapshot of every slot, then of the old workers still draining after a
// reset in direct mode (StateDraining, with the slot they left).
func (p *Pool) Workers() []WorkerInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]WorkerInfo, 0, len(p.slots)+len(p.drains))
	for _, s := range p.slots {
		info := WorkerInfo{Slot: s.id, State: s.state, Requests: int64(s.jobs)}
		if s.w != nil {
			info.PID, info.Started = s.w.PID(), s.started
		}
		if s.state == StateBusy {
			info.BusySince = s.busySince
		}
		if p.concurrency() > 1 {
			info.InFlight = s.inflight
		}
		out = append(out, info)
	}
	for _, d := range p.drains {
		out = append(out, WorkerInfo{Slot: d.slot, PID: d.w.PID(), State: StateDraining, Requests: int64(d.jobs), Started: d.w.Started()})
	}
	return out
}

func (p *Pool) workerOptions(s *slot) worker.Options {
	o := p.o().Worker
	if o.Logger == nil {
		o.Logger = p.log
	}
	o.Logger = o.Logger.With("worker", s.id)
	return o
}

func (p *Pool) markBusyLocked(s *slot) {
	s.state = StateBusy
	s.busySince = time.Now()
}

// stallFloor is the least time a concurrent worker with requests in flight may send nothing
// before the pool counts it as stalled (pickLocked); the bar is higher when requests take long.
const stallFloor = 100 * time.Millisecond

// pickLocked returns the ready slot the next request goes to (the idle list is not empty). A
// sequential worker takes one request at a time: the most recently used one, whose process is
// warmest. Concurrent workers share the load: the least loaded one gets it, but one that has
// requests in flight and sent nothing for a while (stallFloor, or four times the average request
// time) gets it only when all are so: a request stuck in a CPU loop holds every fiber of its
// process, and what is sent there waits with it.
func (p *Pool) pickLocked() *slot {
	s := p.idle[len(p.idle)-1]
	if p.concurrency() == 1 || len(p.idle) == 1 {
		return s
	}
	now := time.Now()
	stall := max(stallFloor, 4*time.Duration(p.avgExec.Load()))
	var best *slot
	bestStalled := false
	for _, c := range p.idle {
		stalled := c.inflight > 0 && now.Sub(latest(c.busySince, c.x.LastFrame())) > stall
		if best == nil || bestStalled && !stalled || stalled == bestStalled && c.inflight < best.inflight {
			best, bestStalled = c, stalled
		}
	}
	return best
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// grantLocked gives n requests (a batch at concurrency 1, else one) to s, a slot of the idle
// list (pickLocked's): the slot is busy, and it leaves the list unless it has room for more.
func (p *Pool) grantLocked(s *slot, n int) {
	if s.inflight == 0 {
		p.markBusyLocked(s)
	}
	s.inflight += n
	if s.inflight >= p.concurrency() {
		p.unidleLocked(s)
	}
}

// concurrency is how many requests one worker runs at once (workers.concurrency, at least 1).
func (p *Pool) concurrency() int { return max(p.o().Concurrency, 1) }

// jobLimitLocked is how many more requests the slot's worker may take before max_jobs.
func (p *Pool) jobLimitLocked(s *slot) int {
	if p.o().MaxJobs <= 0 {
		return maxBatch
	}
	return max(1, p.o().MaxJobs-s.jobs)
}

// publish puts a freshly booted worker into service.
func (p *Pool) publish(s *slot, w *worker.Worker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s.w, s.jobs, s.want, s.started = w, 0, "", w.Started()
	s.state, s.failing = StateReady, false
	s.inflight, s.retiring = 0, nil
	var x *worker.Exchange
	grace := p.o().CancelGrace
	if grace <= 0 {
		grace = cancelGrace
	}
	x = worker.NewExchange(p.life, w, p.concurrency(), grace, func(fate error) { p.ended(s, x, fate) })
	s.x = x
	p.idle = append(p.idle, s)
	p.dispatchLocked()
}

// cancelGrace is, by default (Options.CancelGrace), how long a concurrent worker may take to end a request it was told to cancel
// (exec_timeout, its client left) before it is killed: a request that never yields blocks every
// other request of its worker.
const cancelGrace = time.Second

// ended gives back the capacity of a request that ended on the exchange x of slot s (or was
// never written), with the worker's fate: the slot takes more requests, or, once its last
// request has ended, goes to its supervisor when it failed, said it exits, reached a limit or
// must go (reset, stop).
func (p *Pool) ended(s *slot, x *worker.Exchange, fate error) {
	var rss int64
	if fate == nil && p.o().MaxMemory > 0 {
		rss, _ = s.w.RSS()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.x != x { // an exchange of a worker replaced since: nothing of it is counted any more
		return
	}
	s.inflight--
	s.jobs++
	if s.retiring == nil {
		switch {
		case fate != nil:
			s.retiring = &retirement{reason: reasonFor(fate), err: fate}
		case p.o().MaxJobs > 0 && s.jobs >= p.o().MaxJobs:
			s.retiring = &retirement{reason: "max_jobs"}
		case rss > p.o().MaxMemory && p.o().MaxMemory > 0:
			s.retiring = &retirement{reason: "max_memory", err: fmt.Errorf("rss %d bytes", rss)}
		}
	}
	if s.retiring == nil && s.want == "" && !p.stopping {
		if s.inflight < p.concurrency() && s.inflight+1 >= p.concurrency() { // it was full
			p.idle = append(p.idle, s)
		}
		if s.inflight == 0 {
			s.state = StateReady
		}
		p.dispatchLocked()
		return
	}
	// It takes no more; it goes once its requests have ended.
	p.unidleLocked(s)
	if s.inflight > 0 {
		return
	}
	r := retirement{reason: s.want}
	switch {
	case s.retiring != nil:
		r = *s.retiring
	case r.reason == "":
		r.reason = "stop"
	}
	s.state = StateStopping
	s.retire <- r
	p.dispatchLocked()
}

func reasonFor(err error) string {
	switch {
	case errors.Is(err, worker.ErrExecTimeout):
		return "exec_timeout"
	case errors.Is(err, worker.ErrProtocol):
		return "protocol"
	case errors.Is(err, worker.ErrAbandoned):
		return "abandoned"
	case errors.Is(err, worker.ErrExiting):
		return "exit"
	}
	return "crash"
}

// takeOutLocked takes the slot's worker out of service for reason: at once when it is ready
// (true), or once its request is done, when release sends the retirement (false).
func (p *Pool) takeOutLocked(s *slot, reason string) bool {
	p.unidleLocked(s) // a concurrent worker with room for more takes no more
	if s.state != StateReady {
		s.want = reason
		return false
	}
	s.state = StateStopping
	return true
}

// unidleLocked takes s out of the idle list, if it is there.
func (p *Pool) unidleLocked(s *slot) {
	if n := len(p.idle); n > 0 && p.idle[n-1] == s { // pickLocked's usual choice
		p.idle = p.idle[:n-1]
		return
	}
	for i, t := range p.idle {
		if t == s {
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
			return
		}
	}
}

// supervise is the slot's supervisor goroutine: it watches the slot's worker, replaces it when
// it dies or must go, replaces it on Reset, and stops it on Stop.
func (p *Pool) supervise(s *slot, w *worker.Worker) {
	defer p.wg.Done()
	failures := 0
	for {
		var r retirement
		var ok bool
		r, w, ok = p.watch(s, w) // w changes when a reset replaced it
		if !ok {
			return
		}
		p.obs.WorkerReplaced(r.reason)
		if r.reason == "abandoned" {
			// Stopped on purpose: its client left while PHP was streaming to it.
			p.log.Info("replacing worker", "worker", s.id, "pid", w.PID(), "reason", r.reason, "err", r.err)
		} else if r.err != nil {
			p.log.Error("worker failed; replacing it", "worker", s.id, "pid", w.PID(), "reason", r.reason, "err", r.err)
			// A script that dies by itself right after boot counts towards backoff, so it cannot
			// loop hot. A SIGKILL came from outside the script (an operator, the OOM killer,
			// exec_timeout) and says nothing about its code: the replacement boots at once.
			p.mu.Lock()
			early := time.Since(w.Started()) < time.Second && s.jobs == 0
			p.mu.Unlock()
			if early && !w.KilledBySIGKILL() {
				failures++
			} else {
				failures = 0
			}
		} else {
			p.log.Info("replacing worker", "worker", s.id, "pid", w.PID(), "reason", r.reason)
		}
		p.stopWorker(w)
		p.setState(s, StateStarting, nil)
		if w = p.boot(s, &failures); w == nil {
			return
		}
		p.publish(s, w)
		p.log.Info("worker started", "worker", s.id, "pid", w.PID())
	}
}

// watch waits until the slot's worker must be replaced and says why, with the worker in place
// by then (a reset replaces it meanwhile); false when the pool is stopping and the worker has
// been stopped.
func (p *Pool) watch(s *slot, w *worker.Worker) (retirement, *worker.Worker, bool) {
	exited := w.Exited()
	for {
		select {
		case <-exited:
			p.mu.Lock()
			out := p.takeOutLocked(s, "crash")
			p.mu.Unlock()
			if out && p.o().SelfRetiring && w.ExitedCleanly() {
				return retirement{reason: "retired"}, w, true
			}
			if out {
				return retirement{reason: "crash", err: fmt.Errorf("while idle: %w", w.ExitError())}, w, true
			}
			exited = nil // busy: its request goroutine finds out and sends the retirement
		case r := <-s.retire:
			return r, w, true
		case msg := <-s.ctl:
			nw, err := p.replace(s, w, msg.ctx)
			if nw != nil {
				w, exited = nw, nw.Exited()
			}
			msg.reply <- err
		case <-p.stopped:
			p.mu.Lock()
			out := p.takeOutLocked(s, "stop")
			p.mu.Unlock()
			if !out {
				<-s.retire
			}
			p.stopWorker(w)
			p.setState(s, StateStopping, nil)
			return retirement{}, w, false
		}
	}
}

// replace boots a replacement for w first, so that a deploy that cannot boot leaves w serving,
// then stops w once its request is done, and puts the new worker in its place. In direct mode
// (Options.SelfRetiring) the new worker takes the slot as soon as it has booted and the old one
// drains in the background (drainInBackground): the reset goes on to the next slot at once.
func (p *Pool) replace(s *slot, old *worker.Worker, ctx context.Context) (*worker.Worker, error) {
	nw, err := worker.Start(ctx, p.workerOptions(s))
	if err != nil {
		p.log.Error("worker not replaced: its replacement failed to start", "worker", s.id, "pid", old.PID(), "err", err)
		return nil, fmt.Errorf("replace worker %d: %w", s.id, err)
	}
	p.mu.Lock()
	out := p.takeOutLocked(s, "reset")
	jobs := s.jobs
	p.mu.Unlock()
	if !out {
		r := <-s.retire // the request running on it is done
		if r.err != nil {
			p.log.Error("worker failed while being replaced", "worker", s.id, "pid", old.PID(), "reason", r.reason, "err", r.err)
		}
	}
	if p.o().SelfRetiring {
		p.drainInBackground(s, old, jobs)
	} else {
		p.stopWorker(old)
	}
	p.publish(s, nw)
	p.obs.WorkerReplaced("reset")
	p.log.Info("worker replaced", "worker", s.id, "old_pid", old.PID(), "pid", nw.PID(), "reason", "reset")
	return nw, nil
}

// A drain is an old worker of direct mode that a reset took out of its slot and that finishes
// what it serves beside the slot's new worker.
type drain struct {
	slot int
	w    *worker.Worker
	jobs int                // the requests the pool counted for it
	cut  context.CancelFunc // ends the drain: the worker is killed
	done chan struct{}      // closed once the process is gone
}

// drainInBackground tells old to stop and lets it drain while the pool goes on. A direct-mode
// worker bounds its own drain (it stops accepting, and every connection it keeps is bounded by
// http.body_timeout a read, http.write_timeout a write, workers.exec_timeout a request and the
// 1 s grace of an idle one), so stop_timeout does not cut it: an upload still arriving gets
// its answer. What keeps a hung one from living forever is its owner's (the daemon's backstop,
// internal/daemon/direct.go), the next Reset, which gives what is left of it stop_timeout
// (cutDrains), and Stop's budget, which ends every drain still running.
func (p *Pool) drainInBackground(s *slot, old *worker.Worker, jobs int) {
	ctx, cut := context.WithCancel(p.life) // Stop's budget ends p.life
	d := &drain{slot: s.id, w: old, jobs: jobs, cut: cut, done: make(chan struct{})}
	p.mu.Lock()
	p.drains = append(p.drains, d)
	p.mu.Unlock()
	p.wg.Add(1) // Stop waits for it
	go func() {
		defer p.wg.Done()
		defer cut()
		start := time.Now()
		old.Stop(ctx)
		// Out of the list at once: the daemon's backstop kills listed pids, and this one may be
		// given to another process now.
		p.mu.Lock()
		p.drains = slices.DeleteFunc(p.drains, func(e *drain) bool { return e == d })
		p.mu.Unlock()
		took := time.Since(start).Round(time.Millisecond).String()
		if old.ExitedCleanly() {
			p.log.Info("old worker drained", "worker", s.id, "pid", old.PID(), "took", took)
		} else {
			p.log.Warn("old worker ended while draining", "worker", s.id, "pid", old.PID(), "took", took, "err", old.ExitError())
		}
		close(d.done) // after the log: "all workers replaced" comes after every drain's line
	}()
}

// cutDrains gives the old workers still draining from an earlier reset stop_timeout more, then
// ends them, and returns once they are gone (or ctx is done): a client that trickles an upload
// to one holds back the next reset no longer than a busy worker held back a reset before
// drains ran in the background.
func (p *Pool) cutDrains(ctx context.Context) error {
	p.mu.Lock()
	drains := slices.Clone(p.drains)
	p.mu.Unlock()
	if len(drains) == 0 {
		return nil
	}
	grace := time.NewTimer(p.o().StopTimeout)
	defer grace.Stop()
	for _, d := range drains {
		select {
		case <-d.done:
			continue
		case <-grace.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		left := slices.DeleteFunc(drains, func(d *drain) bool {
			select {
			case <-d.done:
				return true
			default:
				return false
			}
		})
		p.log.Warn("old workers still draining from an earlier reset after stop_timeout: killing them", "count", len(left))
		for _, d := range left {
			d.cut()
		}
		break
	}
	return p.awaitDrains(ctx)
}

// awaitDrains waits until every old worker draining now has exited, or ctx is done.
func (p *Pool) awaitDrains(ctx context.Context) error {
	p.mu.Lock()
	drains := slices.Clone(p.drains)
	p.mu.Unlock()
	for _, d := range drains {
		select {
		case <-d.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// stopWorker stops an idle worker, giving it stop_timeout to exit (the pool's stop budget when
// the pool is stopping); a dead one is only reaped.
func (p *Pool) stopWorker(w *worker.Worker) {
	p.mu.Lock()
	ctx := p.stopCtx
	p.mu.Unlock()
	if ctx == nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(p.life, p.o().StopTimeout)
		defer cancel()
	}
	w.Stop(ctx)
}

func (p *Pool) setState(s *slot, st State, w *worker.Worker) {
	p.mu.Lock()
	s.state, s.w = st, w
	p.mu.Unlock()
}

// bootFailed marks the slot as one whose worker cannot even boot (a crash of a running worker
// does not count: its replacement may well serve). When that holds for every slot, nothing can
// serve what waits: it is answered now, not after allocate_timeout.
func (p *Pool) bootFailed(s *slot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s.failing = true
	if p.allFailingLocked() {
		p.failQueueLocked(unavailable(ErrNoWorker))
	}
}

// backoffDelay is the wait before boot attempt n (n consecutive failures so far).
func backoffDelay(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	d := 100 * time.Millisecond << min(n-1, 7)
	return min(d, 10*time.Second)
}

// boot starts a worker for the slot, backing off exponentially after failures. Reset requests
// meanwhile are answered with an error: there is nothing to replace. It returns nil if the pool
// is stopping.
func (p *Pool) boot(s *slot, failures *int) *worker.Worker {
	ctx, cancel := context.WithCancel(p.life)
	defer cancel()
	go func() {
		select {
		case <-p.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		if d := backoffDelay(*failures); d > 0 {
			p.setState(s, StateBackoff, nil)
			t := time.NewTimer(d)
			for waiting := true; waiting; {
				select {
				case <-t.C:
					waiting = false
				case msg := <-s.ctl:
					msg.reply <- fmt.Errorf("worker %d: not replaced: it is restarting after failures", s.id)
				case <-ctx.Done():
					t.Stop()
					p.setState(s, StateStopping, nil)
					return nil
				}
			}
		}
		p.setState(s, StateStarting, nil)
		type result struct {
			w   *worker.Worker
			err error
		}
		done := make(chan result, 1)
		go func() {
			w, err := worker.Start(ctx, p.workerOptions(s))
			done <- result{w, err}
		}()
		var res result
		for waiting := true; waiting; {
			select {
			case res = <-done:
				waiting = false
			case msg := <-s.ctl:
				msg.reply <- fmt.Errorf("worker %d: not replaced: it is starting", s.id)
			}
		}
		if ctx.Err() != nil {
			if res.w != nil {
				res.w.Kill()
				<-res.w.Exited()
			}
			p.setState(s, StateStopping, nil)
			return nil
		}
		if res.err == nil {
			return res.w
		}
		*failures++
		p.bootFailed(s)
		p.log.Error("worker failed to start", "worker", s.id, "attempt", *failures, "retry_in", backoffDelay(*failures).String(), "err", res.err)
	}
}
