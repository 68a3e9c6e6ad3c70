package pool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/peregrinephp/peregrine/internal/worker"
)

// State is what a worker slot is doing, as shown by Workers.
type State string

// Slot states.
//
//	starting ──> ready <──> busy
//	   ^  │        │         │
//	   │  v        v         v
//	 backoff <── (crash, limits, reset) ──> stopping
const (
	StateStarting State = "starting"
	StateReady    State = "ready"
	StateBusy     State = "busy"
	StateBackoff  State = "backoff"
	StateStopping State = "stopping"
)

type ctlKind int

const (
	ctlReset ctlKind = iota
	ctlStop
)

type ctlMsg struct {
	kind  ctlKind
	reply chan error
}

// slot is one place in the pool, filled by one worker process at a time. Its goroutine (run)
// owns the worker; the fields under mu are for Workers.
type slot struct {
	p      *Pool
	id     int
	assign chan []*job // cap 1: a batch for a slot that was idle
	ctl    chan ctlMsg

	w        *worker.Worker
	jobs     int // requests the current worker has answered
	failures int // consecutive failed boots or early deaths, for backoff

	mu        sync.Mutex
	cur       *worker.Worker // s.w, for Stop to kill when the slot does not answer in time
	info      WorkerInfo
	busySince time.Time
}

// WorkerInfo describes one worker slot at a moment.
type WorkerInfo struct {
	Slot     int       `json:"slot"`
	PID      int       `json:"pid"`
	State    State     `json:"state"`
	Requests int64     `json:"requests"` // answered by the current process
	Started  time.Time `json:"started"`  // when the current process started
	// BusySince is when the current batch started; zero when not busy.
	BusySince time.Time `json:"busy_since,omitzero"`
}

// Workers returns a snapshot of every slot.
func (p *Pool) Workers() []WorkerInfo {
	out := make([]WorkerInfo, 0, len(p.slots))
	for _, s := range p.slots {
		s.mu.Lock()
		info := s.info
		info.Slot = s.id
		info.BusySince = s.busySince
		s.mu.Unlock()
		out = append(out, info)
	}
	return out
}

func (s *slot) setState(st State) {
	s.mu.Lock()
	s.info.State = st
	if st != StateBusy {
		s.busySince = time.Time{}
	}
	s.mu.Unlock()
}

func (s *slot) setWorker(w *worker.Worker) {
	s.w = w
	s.jobs = 0
	s.mu.Lock()
	s.cur = w
	s.info = WorkerInfo{PID: w.PID(), State: StateReady, Started: w.Started()}
	s.mu.Unlock()
}

func (s *slot) workerOptions() worker.Options {
	o := s.p.opts.Worker
	if o.Logger == nil {
		o.Logger = s.p.log
	}
	o.Logger = o.Logger.With("worker", s.id)
	return o
}

// jobLimit is how many more requests the current worker may take before max_jobs.
func (s *slot) jobLimit() int {
	if s.p.opts.MaxJobs <= 0 {
		return maxBatch
	}
	return max(1, s.p.opts.MaxJobs-s.jobs)
}

// run is the slot's goroutine: it waits for work, runs it, and replaces its worker when needed.
// Control messages are read between batches, so a reset or stop is never starved by load.
// idle says whether Start already put the slot on the idle list.
func (s *slot) run(idle bool) {
	defer s.p.wg.Done()
	for {
		var batch []*job
		if !idle {
			if s.w == nil && !s.boot() {
				return
			}
			select {
			case msg := <-s.ctl:
				if s.control(msg, nil) {
					return
				}
				continue
			default:
			}
			s.p.mu.Lock()
			batch = s.p.takeLocked(s.jobLimit())
			if batch == nil {
				s.p.idle = append(s.p.idle, s)
			}
			s.p.mu.Unlock()
		}
		idle = false
		if batch == nil {
			select {
			case batch = <-s.assign:
			case <-s.w.Exited():
				if !s.p.leaveIdle(s) {
					batch = <-s.assign
				}
				s.replace("crash", fmt.Errorf("while idle: %w", s.w.ExitError()))
				if batch == nil {
					continue
				}
				if !s.boot() {
					s.p.requeue(batch)
					return
				}
			case msg := <-s.ctl:
				if !s.p.leaveIdle(s) {
					batch = <-s.assign
				}
				if s.control(msg, batch) {
					return
				}
				continue
			}
		}
		s.exec(batch)
	}
}

// control handles a reset or stop between batches; batch, if any, was already claimed for this
// slot and is run first. It reports whether the slot is done.
func (s *slot) control(msg ctlMsg, batch []*job) bool {
	if batch != nil {
		s.exec(batch)
	}
	if msg.kind == ctlStop {
		s.stop()
		return true
	}
	if s.w == nil {
		msg.reply <- fmt.Errorf("worker %d: not replaced: it failed and is restarting", s.id)
		return false
	}
	msg.reply <- s.reset()
	return false
}

// exec runs a batch on the current worker and deals with the outcome.
func (s *slot) exec(batch []*job) {
	frames := make([][]byte, len(batch))
	for i, j := range batch {
		frames[i] = j.frame
	}
	w := s.w
	start := time.Now()
	s.mu.Lock()
	s.info.State = StateBusy
	s.busySince = start
	s.mu.Unlock()
	answered, started, err := w.Exec(frames, s.p.opts.ExecTimeout, func(i int, payload []byte) {
		batch[i].done <- Result{Payload: payload, PID: w.PID()}
	})
	s.jobs += answered
	s.mu.Lock()
	s.info.Requests += int64(answered)
	s.mu.Unlock()
	if err != nil {
		rest := batch[answered:]
		if started {
			rest[0].done <- Result{Err: err, PID: w.PID()}
			rest = rest[1:]
		}
		reason := "crash"
		switch {
		case errors.Is(err, worker.ErrExecTimeout):
			reason = "exec_timeout"
		case errors.Is(err, worker.ErrProtocol):
			reason = "protocol"
		}
		s.replace(reason, err)
		s.p.requeue(rest)
		return
	}
	s.p.recordExec(time.Since(start) / time.Duration(answered))
	s.failures = 0
	s.setState(StateReady)
	switch {
	case s.p.opts.MaxJobs > 0 && s.jobs >= s.p.opts.MaxJobs:
		s.recycle("max_jobs", nil)
	case s.p.opts.MaxMemory > 0:
		if rss, err := w.RSS(); err == nil && rss > s.p.opts.MaxMemory {
			s.recycle("max_memory", "rss_bytes", rss)
		}
	}
}

// recycle stops a healthy worker that reached a limit; the next loop boots a fresh one.
func (s *slot) recycle(reason string, attrs ...any) {
	s.p.obs.WorkerReplaced(reason)
	attrs = append(attrs, "worker", s.id, "pid", s.w.PID(), "reason", reason, "requests", s.jobs)
	s.p.log.Info("replacing worker", attrs...)
	s.stopWorker()
}

// replace records a worker that died or was killed; the next loop boots a fresh one.
func (s *slot) replace(reason string, err error) {
	s.p.obs.WorkerReplaced(reason)
	s.p.log.Error("worker failed; replacing it", "worker", s.id, "pid", s.w.PID(), "reason", reason, "err", err)
	// A script that dies by itself right after boot counts towards backoff, so it cannot loop
	// hot. A SIGKILL came from outside the script (an operator, the OOM killer, exec_timeout)
	// and says nothing about its code: the replacement boots at once.
	if time.Since(s.w.Started()) < time.Second && s.jobs == 0 && !s.w.KilledBySIGKILL() {
		s.failures++
	}
	s.clearWorker()
}

// clearWorker forgets the current worker, which has exited.
func (s *slot) clearWorker() {
	s.w = nil
	s.mu.Lock()
	s.cur = nil
	s.info = WorkerInfo{State: StateStarting} // no pid or uptime of a process that is gone
	s.mu.Unlock()
}

func (s *slot) stopWorker() {
	s.setState(StateStopping)
	ctx, cancel := s.stopContext()
	defer cancel()
	s.w.Stop(ctx)
	s.clearWorker()
}

func (s *slot) stopContext() (context.Context, context.CancelFunc) {
	if s.p.opts.StopTimeout <= 0 {
		return context.WithCancel(context.Background())
	}
	return context.WithTimeout(context.Background(), s.p.opts.StopTimeout)
}

func (s *slot) stop() {
	if s.w != nil {
		s.stopWorker()
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

// boot starts a worker for the slot, backing off exponentially after failures. It returns false
// if the pool is stopping.
func (s *slot) boot() bool {
	for {
		if d := backoffDelay(s.failures); d > 0 {
			s.setState(StateBackoff)
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case msg := <-s.ctl:
				t.Stop()
				if msg.kind == ctlStop {
					s.setState(StateStopping)
					return false
				}
				msg.reply <- fmt.Errorf("worker %d: not replaced: it is restarting after failures", s.id)
				continue
			}
		}
		s.setState(StateStarting)
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan bool, 1)
		go func() { // a stop must not wait for a slow boot
			select {
			case msg := <-s.ctl:
				if msg.kind == ctlStop {
					cancel()
					stopped <- true
					return
				}
				msg.reply <- fmt.Errorf("worker %d: not replaced: it is starting", s.id)
				stopped <- false
			case <-ctx.Done():
				stopped <- false
			}
		}()
		w, err := worker.Start(ctx, s.workerOptions())
		cancel()
		if <-stopped {
			if w != nil {
				w.Kill()
				<-w.Exited()
			}
			s.setState(StateStopping)
			return false
		}
		if err == nil {
			s.setWorker(w)
			s.p.log.Info("worker started", "worker", s.id, "pid", w.PID())
			return true
		}
		s.failures++
		s.p.log.Error("worker failed to start", "worker", s.id, "attempt", s.failures, "retry_in", backoffDelay(s.failures).String(), "err", err)
	}
}

// reset replaces the slot's idle worker: boot a new one first, so a broken deploy leaves the
// old one serving, then stop the old one.
func (s *slot) reset() error {
	old := s.w
	s.setState(StateStarting)
	w, err := worker.Start(context.Background(), s.workerOptions())
	if err != nil {
		s.setState(StateReady)
		s.p.log.Error("worker not replaced: its replacement failed to start", "worker", s.id, "pid", old.PID(), "err", err)
		return fmt.Errorf("replace worker %d: %w", s.id, err)
	}
	s.setState(StateStopping)
	ctx, cancel := s.stopContext()
	old.Stop(ctx)
	cancel()
	s.setWorker(w)
	s.p.obs.WorkerReplaced("reset")
	s.p.log.Info("worker replaced", "worker", s.id, "old_pid", old.PID(), "pid", w.PID(), "reason", "reset")
	return nil
}
