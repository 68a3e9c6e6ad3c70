package pool

import (
	"time"

	"github.com/peregrinephp/peregrine/internal/worker"
)

// cancelGrace is how long a concurrent worker may take to end a request it was told to cancel
// (exec_timeout, its client left) before it is killed: a request that never yields blocks every
// other request of its worker.
const cancelGrace = time.Second

// runConcurrent runs one request on a concurrent worker's Mux (workers.concurrency > 1). The
// slot's capacity was taken by grantLocked and comes back in ended, when the worker says the
// request ended. It reports whether w must wait again: the worker took no more requests.
func (p *Pool) runConcurrent(s *slot, w *waiter) (retry bool) {
	p.mu.Lock()
	m, pid := s.mux, s.w.PID() // the slot may hold another worker by the time it ends
	if err := w.ctx.Err(); err != nil {
		p.finishLocked(w, 0, err)
		p.mu.Unlock()
		p.ended(s, m, nil) // never written
		return false
	}
	p.mu.Unlock()
	start := time.Now()
	m.Do(w.ctx, w.call, p.o().ExecTimeout)
	switch w.call.Outcome {
	case worker.Answered:
		p.recordExec(time.Since(start))
		w.pid = pid
	case worker.Failed:
		w.pid, w.err = pid, callError(w)
	case worker.Unread:
		p.mu.Lock()
		p.requeueLocked([]*waiter{w})
		p.mu.Unlock()
		return true
	}
	return false
}

// ended gives back the capacity of a request that ended on the Mux m of slot s, with the
// worker's fate: the slot takes more requests, or, once its last request has ended, goes to its
// supervisor when it failed, said it exits, reached a limit or must go (reset, stop).
func (p *Pool) ended(s *slot, m *worker.Mux, fate error) {
	var rss int64
	if fate == nil && p.o().MaxMemory > 0 {
		rss, _ = s.w.RSS()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.mux != m { // a Mux of a worker replaced since: nothing of it is counted any more
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
			s.retiring = &retirement{reason: "max_memory"}
		}
	}
	if s.retiring == nil && s.want == "" && !p.stopping {
		if s.inflight == p.o().Concurrency-1 { // it was full
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
