package pool

import (
	"context"
	"errors"
	"fmt"
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

	// A concurrent worker (workers.concurrency > 1) runs requests through its Mux.
	mux      *worker.Mux
	inflight int         // its requests not yet ended (DONE)
	retiring *retirement // why it must go once inflight is 0
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
}

// Workers returns a snapshot of every slot.
func (p *Pool) Workers() []WorkerInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]WorkerInfo, 0, len(p.slots))
	for _, s := range p.slots {
		info := WorkerInfo{Slot: s.id, State: s.state, Requests: int64(s.jobs)}
		if s.w != nil {
			info.PID, info.Started = s.w.PID(), s.started
		}
		if s.state == StateBusy {
			info.BusySince = s.busySince
		}
		info.InFlight = s.inflight
		out = append(out, info)
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

// grantLocked gives one request to s, the last slot of the idle list: the slot is busy, and it
// leaves the list unless it is a concurrent worker with room for another request.
func (p *Pool) grantLocked(s *slot) {
	if s.mux == nil {
		p.idle = p.idle[:len(p.idle)-1]
		p.markBusyLocked(s)
		return
	}
	if s.inflight == 0 {
		p.markBusyLocked(s)
	}
	s.inflight++
	if s.inflight >= p.o().Concurrency {
		p.idle = p.idle[:len(p.idle)-1]
	}
}

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
	s.mux, s.inflight, s.retiring = nil, 0, nil
	if p.o().Concurrency > 1 {
		var m *worker.Mux
		m = worker.NewMux(p.life, w, cancelGrace, func(fate error) { p.ended(s, m, fate) })
		s.mux = m
	}
	p.idle = append(p.idle, s)
	p.dispatchLocked()
}

// release ends a batch on slot s: the slot goes back to ready, or, when its worker failed or
// reached a limit or must go, to its supervisor. Requests to run again go first in the queue.
func (p *Pool) release(s *slot, answered int, err error, requeue []*waiter) {
	var rss int64
	if err == nil && p.o().MaxMemory > 0 {
		rss, _ = s.w.RSS()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s.jobs += answered
	p.requeueLocked(requeue)
	var r retirement
	switch {
	case err != nil:
		r = retirement{reason: reasonFor(err), err: err}
	case s.want != "":
		r.reason = s.want
	case p.stopping:
		r.reason = "stop"
	case p.o().MaxJobs > 0 && s.jobs >= p.o().MaxJobs:
		r.reason = "max_jobs"
	case rss > p.o().MaxMemory && p.o().MaxMemory > 0:
		r = retirement{reason: "max_memory", err: fmt.Errorf("rss %d bytes", rss)}
	}
	if r.reason == "" {
		s.state = StateReady
		p.idle = append(p.idle, s)
	} else {
		s.state = StateStopping
		s.retire <- r
	}
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
// then stops w once its request is done, and puts the new worker in its place.
func (p *Pool) replace(s *slot, old *worker.Worker, ctx context.Context) (*worker.Worker, error) {
	nw, err := worker.Start(ctx, p.workerOptions(s))
	if err != nil {
		p.log.Error("worker not replaced: its replacement failed to start", "worker", s.id, "pid", old.PID(), "err", err)
		return nil, fmt.Errorf("replace worker %d: %w", s.id, err)
	}
	p.mu.Lock()
	out := p.takeOutLocked(s, "reset")
	p.mu.Unlock()
	if !out {
		r := <-s.retire // the request running on it is done
		if r.err != nil {
			p.log.Error("worker failed while being replaced", "worker", s.id, "pid", old.PID(), "reason", r.reason, "err", r.err)
		}
	}
	p.stopWorker(old)
	p.publish(s, nw)
	p.obs.WorkerReplaced("reset")
	p.log.Info("worker replaced", "worker", s.id, "old_pid", old.PID(), "pid", nw.PID(), "reason", "reset")
	return nw, nil
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
