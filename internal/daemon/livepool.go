package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peregrinephp/peregrine/internal/admin"
	"github.com/peregrinephp/peregrine/internal/httpserver"
	"github.com/peregrinephp/peregrine/internal/pool"
	"github.com/peregrinephp/peregrine/internal/worker"
)

// livePool is the worker pool requests run on. A reload that changes workers.count or
// workers.concurrency, which a running pool.Pool cannot take, replaces the pool whole, as
// php-fpm's reload starts its children anew:
//
//	old serves ──► new pool boots all its workers ──► new requests go to new ──► old drains, stops
//	              (old still serves; a boot failure     (one atomic swap)          (stop_timeout)
//	               leaves it serving, the error logged)
//
// A request the old pool refused as stopping never reached PHP (pool.ErrStopped), so Do runs
// it on the new pool instead: no request fails for the replacement.
type livePool struct {
	cur atomic.Pointer[pool.Pool]
	// opts are the current pool's options as last given (New, SetOptions): what the worker
	// template goes back to when a new pool cannot start.
	opts atomic.Pointer[pool.Options]
	// concurrency is the current pool's workers.concurrency, for the handler's choice of who
	// parses multipart bodies, as native says whether the workers run the native runtime.
	concurrency atomic.Int32
	native      bool
	log         *slog.Logger

	mu sync.Mutex // one Reset or Replace at a time

	swapMu   sync.Mutex // the swap against Stop: a pool started late is never left running
	stopping bool
}

var (
	_ httpserver.Runner = (*livePool)(nil)
	_ admin.Pool        = (*livePool)(nil)
)

// newLivePool returns a livePool whose first pool runs on o; native says whether the workers run
// the native runtime.
func newLivePool(o pool.Options, native bool, log *slog.Logger) *livePool {
	l := &livePool{log: log, native: native}
	l.cur.Store(pool.New(o))
	l.opts.Store(&o)
	l.concurrency.Store(int32(max(o.Concurrency, 1)))
	return l
}

// Do runs call on the current pool; see pool.Pool.Do. It holds the call's bytes itself
// (worker.Call, "who owns a request's bytes"): a pool drops its own hold when it returns, and
// without this one the bytes of a call refused as stopping would be released before the new
// pool writes them.
func (l *livePool) Do(ctx context.Context, call *worker.Call) (int, error) {
	call.Hold()
	defer call.Drop()
	for {
		p := l.cur.Load()
		pid, err := p.Do(ctx, call)
		if errors.Is(err, pool.ErrStopped) && l.cur.Load() != p {
			continue // replaced meanwhile, and nothing of it reached PHP: the new pool runs it
		}
		return pid, err
	}
}

// ParseMultipart says whether the server parses multipart bodies for the current pool: the
// native runtime's PHP parses them itself, as under PHP-FPM, except that concurrent requests
// run in the PHP library's loop, which takes the fields and files the server parsed.
func (l *livePool) ParseMultipart() bool { return !l.native || l.concurrency.Load() > 1 }

// Admit implements httpserver.Runner.
func (l *livePool) Admit() error { return l.cur.Load().Admit() }

// Workers implements admin.Pool.
func (l *livePool) Workers() []pool.WorkerInfo { return l.cur.Load().Workers() }

// Ready implements admin.Pool.
func (l *livePool) Ready() int { return l.cur.Load().Ready() }

// Waiting implements admin.Pool.
func (l *livePool) Waiting() int { return l.cur.Load().Waiting() }

// PHPVersion returns the PHP version the current pool's workers report.
func (l *livePool) PHPVersion() string { return l.cur.Load().PHPVersion() }

// Start boots the first pool's workers.
func (l *livePool) Start(ctx context.Context) error { return l.cur.Load().Start(ctx) }

// Reset replaces every worker of the current pool, one at a time; see pool.Pool.Reset.
func (l *livePool) Reset(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur.Load().Reset(ctx)
}

// SetOptions hands o to the current pool (reload.go's optionSetter); see pool.Pool.SetOptions.
func (l *livePool) SetOptions(o pool.Options) error {
	if err := l.cur.Load().SetOptions(o); err != nil {
		return err
	}
	l.opts.Store(&o)
	return nil
}

// Replace starts a pool on o and, once all its workers are ready, moves new requests to it and
// stops the old one, which has drain to finish what it runs. If the new pool cannot start, the
// old one goes on serving and the error says why. With workers.fork, the template is renewed
// on o's worker options first, as a Reset does, and back on the running ones if the new pool
// cannot start: the running pool's workers that die meanwhile come back as they were.
func (l *livePool) Replace(ctx context.Context, o pool.Options, drain time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := o.Worker.Template
	if t != nil {
		t.Configure(o.Worker)
		if err := t.Renew(ctx); err != nil {
			l.restoreTemplate(ctx)
			return fmt.Errorf("renew the worker template: %w", err)
		}
	}
	next := pool.New(o)
	if err := next.Start(ctx); err != nil {
		if t != nil {
			l.restoreTemplate(ctx)
		}
		return fmt.Errorf("the new workers (workers.count %d, workers.concurrency %d) could not start; the running ones go on: %w",
			o.Size, max(o.Concurrency, 1), err)
	}
	l.swapMu.Lock()
	if l.stopping {
		l.swapMu.Unlock()
		next.Stop(ctx)
		return pool.ErrStopped
	}
	old := l.cur.Swap(next)
	l.opts.Store(&o)
	l.concurrency.Store(int32(max(o.Concurrency, 1)))
	l.swapMu.Unlock()
	l.log.Info("new requests go to the new workers; the old ones finish what they run", "workers", o.Size,
		"concurrency", max(o.Concurrency, 1))
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
	defer cancel()
	old.Stop(stopCtx)
	return nil
}

// restoreTemplate puts the worker template back on the running pool's worker options, so that
// the running pool forks its replacements as before. A failure is logged: the running workers
// serve on, and only their replacements would fail.
func (l *livePool) restoreTemplate(ctx context.Context) {
	w := l.opts.Load().Worker
	if w.Template == nil {
		return
	}
	w.Template.Configure(w)
	if err := w.Template.Renew(ctx); err != nil {
		l.log.Error("the worker template could not go back to the running workers' settings", "err", err)
	}
}

// Stop stops the current pool; see pool.Pool.Stop. A Replace under way after it starts no pool.
func (l *livePool) Stop(ctx context.Context) {
	l.swapMu.Lock()
	l.stopping = true
	p := l.cur.Load()
	l.swapMu.Unlock()
	p.Stop(ctx)
}

// serverPool is the pool as the admin listener sees it: its Reset (POST /reset, peregrine
// reset) is reset's, which reads the config again as SIGHUP does.
type serverPool struct {
	*livePool
	reset func(ctx context.Context) error
}

// Reset implements admin.Pool.
func (s serverPool) Reset(ctx context.Context) error { return s.reset(ctx) }
