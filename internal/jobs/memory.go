package jobs

import (
	"container/heap"
	"context"
	"slices"
	"sync"
	"time"
)

// Memory is the memory driver: the queue lives in this server's memory and dies with it.
// Delayed jobs wait on a timer heap: one timer, set to the earliest due time.
type Memory struct {
	mu      sync.Mutex
	queued  []*Job          // FIFO
	delayed dueHeap         // by Due
	running map[uint64]*Job // by delivery number
	started map[uint64]bool // deliveries begun (Start)
	dead    []*Job          //
	seq     uint64          // delivery numbers
	wake    chan struct{}   // closed and replaced when a job becomes runnable
	timer   *time.Timer     // fires at delayed[0].Due
	closed  bool            //
}

var _ Driver = (*Memory)(nil)

// NewMemory returns an empty memory driver.
func NewMemory() *Memory {
	return &Memory{running: map[uint64]*Job{}, started: map[uint64]bool{}, wake: make(chan struct{})}
}

// Push implements Driver.
func (m *Memory) Push(_ context.Context, j *Job) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.addLocked(j)
	return nil
}

func (m *Memory) addLocked(j *Job) {
	if j.Due > now() {
		heap.Push(&m.delayed, j)
		m.armLocked()
		return
	}
	m.queued = append(m.queued, j)
	close(m.wake)
	m.wake = make(chan struct{})
}

// armLocked sets the timer to the earliest due time.
func (m *Memory) armLocked() {
	if len(m.delayed) == 0 {
		return
	}
	d := time.Duration(m.delayed[0].Due-now()) * time.Millisecond
	if m.timer == nil {
		m.timer = time.AfterFunc(d, m.promote)
		return
	}
	m.timer.Reset(d)
}

// promote moves the delayed jobs that are due to the queue.
func (m *Memory) promote() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	t := now()
	moved := false
	for len(m.delayed) > 0 && m.delayed[0].Due <= t {
		j := heap.Pop(&m.delayed).(*Job)
		m.queued = append(m.queued, j)
		moved = true
	}
	if moved {
		close(m.wake)
		m.wake = make(chan struct{})
	}
	m.armLocked()
}

// Receive implements Driver.
func (m *Memory) Receive(ctx context.Context, max int) ([]*Delivery, error) {
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, ErrClosed
		}
		if n := min(max, len(m.queued)); n > 0 {
			ds := make([]*Delivery, n)
			for i, j := range m.queued[:n] {
				m.seq++
				m.running[m.seq] = j
				ds[i] = &Delivery{Job: j, ref: m.seq}
			}
			clear(m.queued[:n])
			m.queued = m.queued[n:]
			m.mu.Unlock()
			return ds, nil
		}
		wake := m.wake
		m.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wake:
		}
	}
}

func (m *Memory) settle(d *Delivery) {
	delete(m.running, d.ref.(uint64))
	delete(m.started, d.ref.(uint64))
}

// Start implements Driver: this server is the only one, so the lease is never lost.
func (m *Memory) Start(_ context.Context, d *Delivery) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.running[d.ref.(uint64)]; ok {
		m.started[d.ref.(uint64)] = true
	}
	return nil
}

// Renew implements Driver: nothing to renew in this server.
func (m *Memory) Renew(context.Context, []*Delivery) ([]*Delivery, error) { return nil, nil }

// Ack implements Driver.
func (m *Memory) Ack(_ context.Context, d *Delivery) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.settle(d)
	return nil
}

// Retry implements Driver.
func (m *Memory) Retry(_ context.Context, d *Delivery, next *Job) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.settle(d)
	if m.closed {
		return ErrClosed
	}
	m.addLocked(next)
	return nil
}

// Release implements Driver: the job goes back to the front of the queue.
func (m *Memory) Release(_ context.Context, d *Delivery) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.settle(d)
	if m.closed {
		return ErrClosed
	}
	m.queued = append([]*Job{d.Job}, m.queued...)
	close(m.wake)
	m.wake = make(chan struct{})
	return nil
}

// Bury implements Driver.
func (m *Memory) Bury(_ context.Context, d *Delivery, keep bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.settle(d)
	if keep {
		m.dead = append(m.dead, d.Job)
	}
	return nil
}

// Revive implements Driver.
func (m *Memory) Revive(_ context.Context) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := len(m.dead)
	for _, j := range m.dead {
		m.addLocked(j.revived())
	}
	m.dead = nil
	return n, nil
}

// DeadLetters implements Driver.
func (m *Memory) DeadLetters(_ context.Context, limit, maxPayload int) ([]*Job, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Job, 0, min(limit, len(m.dead)))
	for _, j := range m.dead[:min(limit, len(m.dead))] {
		c := *j
		c.Payload = CutPayload(c.Payload, maxPayload)
		out = append(out, &c)
	}
	return out, nil
}

// DeadLetter implements Driver.
func (m *Memory) DeadLetter(_ context.Context, id string) (*Job, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := slices.IndexFunc(m.dead, func(j *Job) bool { return j.ID == id })
	if i < 0 {
		return nil, ErrNoSuchJob
	}
	c := *m.dead[i]
	return &c, nil
}

// ReviveOne implements Driver.
func (m *Memory) ReviveOne(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := slices.IndexFunc(m.dead, func(j *Job) bool { return j.ID == id })
	if i < 0 {
		return ErrNoSuchJob
	}
	m.addLocked(m.dead[i].revived())
	m.dead = slices.Delete(m.dead, i, i+1)
	return nil
}

// DeleteDead implements Driver.
func (m *Memory) DeleteDead(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := slices.IndexFunc(m.dead, func(j *Job) bool { return j.ID == id })
	if i < 0 {
		return ErrNoSuchJob
	}
	m.dead = slices.Delete(m.dead, i, i+1)
	return nil
}

// Stats implements Driver.
func (m *Memory) Stats(_ context.Context) (Stats, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Stats{
		Queued: int64(len(m.queued) + len(m.running) - len(m.started)), Delayed: int64(len(m.delayed)),
		Running: int64(len(m.started)), Dead: int64(len(m.dead))}, nil
}

// Close implements Driver: the jobs still queued are lost.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	if m.timer != nil {
		m.timer.Stop()
	}
	close(m.wake)
	m.wake = make(chan struct{})
	return nil
}

// dueHeap orders delayed jobs by due time.
type dueHeap []*Job

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].Due < h[j].Due }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(*Job)) }
func (h *dueHeap) Pop() any {
	old := *h
	j := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return j
}
