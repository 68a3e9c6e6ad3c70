package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"sync"
	"time"

	"github.com/peregrinephp/peregrine/internal/config"
	"github.com/peregrinephp/peregrine/internal/pool"
	"github.com/peregrinephp/peregrine/internal/worker"
)

// Reload on SIGHUP and peregrine reset (as php-fpm and Caddy do): the daemon reads the config
// file again through Options.Reload. What a running server can take is applied: the workers'
// settings (handed to the pool, then every worker is replaced, as SIGHUP always did), the
// pool's limits, workers.stop_timeout, log.level, log.access and log.access_file. A change of
// workers.count or workers.concurrency, which a running pool cannot take, replaces the pool
// whole with the reset (livepool.go), the other worker settings of the same edit with it. What
// needs a restart (the listeners, the workers' mode, tables, jobs, log.format) is logged by key
// and left as it runs. An invalid file changes nothing: the error is logged and the running
// config stays.

// optionSetter is what the daemon needs from the pool to apply a reload: new options for the
// workers started from now on (the reset that follows replaces all of them) and new limits for
// the requests to come. Size, Concurrency, Logger and Observer do not change: a new shape
// takes a new pool (livePool.Replace).
type optionSetter interface {
	SetOptions(o pool.Options) error
}

// shape is what a running pool cannot change: its worker count and concurrency.
type shape struct{ count, concurrency int }

func shapeOf(w config.Workers) shape {
	return shape{w.ResolvedCount(), max(w.Concurrency, 1)}
}

// poolOptions are the pool's options for cfg.
func poolOptions(cfg config.Config, size int, w worker.Options, log *slog.Logger, obs pool.Observer) pool.Options {
	return pool.Options{
		Size:            size,
		Concurrency:     cfg.Workers.Concurrency,
		Worker:          w,
		MaxJobs:         cfg.Workers.MaxJobs,
		MaxMemory:       int64(cfg.Workers.MaxMemory),
		ExecTimeout:     time.Duration(cfg.Workers.ExecTimeout),
		AllocateTimeout: time.Duration(cfg.Workers.AllocateTimeout),
		MaxQueue:        cfg.Workers.MaxQueue,
		StopTimeout:     time.Duration(cfg.Workers.StopTimeout),
		SelfRetiring:    cfg.HTTP.Direct, // direct.go: the workers count their own jobs
		Logger:          log,
		Observer:        obs,
	}
}

// restartKeys lists the config keys that differ between old and next and that a running
// server cannot change.
func restartKeys(old, next config.Config) []string {
	var keys []string
	diff := func(key string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			keys = append(keys, key)
		}
	}
	diff("http", old.HTTP, next.HTTP)
	diff("admin", old.Admin, next.Admin)
	diff("tables", old.Tables, next.Tables)
	diff("jobs", old.Jobs, next.Jobs)
	diff("websocket", old.WebSocket, next.WebSocket) // the hub is made once (websocket.go)
	diff("log.format", old.Log.Format, next.Log.Format)
	diff("workers.runtime", old.Workers.Runtime, next.Workers.Runtime)
	diff("workers.fork", old.Workers.Fork, next.Workers.Fork)
	diff("workers.watch", old.Workers.Watch, next.Workers.Watch)
	if (len(old.Workers.Command) == 0) != (len(next.Workers.Command) == 0) {
		keys = append(keys, "workers.command (classic mode and worker mode)")
	}
	return keys
}

// workerKeysChanged says whether next changes what the pool holds (worker.Options and the
// limits), beyond stop_timeout, which the daemon reads itself.
func workerKeysChanged(old, next config.Config) bool {
	a, b := old.Workers, next.Workers
	a.StopTimeout, b.StopTimeout = 0, 0
	return !reflect.DeepEqual(a, b) || (old.Log.Level == "debug") != (next.Log.Level == "debug")
}

// reloader applies a new config to a running server; see the comment at the top of the file.
// Its methods are safe for concurrent use (SIGHUP and the admin listener's reset).
type reloader struct {
	log    *slog.Logger
	level  *slog.LevelVar         // nil: the level is fixed
	access func(config.Log) error // points the access log where log.access and access_file say; nil: fixed
	pool   any                    // an optionSetter once the pool has SetOptions
	// workerOptions builds the options of the workers for a config (daemon.Run's).
	workerOptions func(config.Config) (worker.Options, error)
	poolOptions   func(config.Config, worker.Options) pool.Options

	mu      sync.Mutex
	running *config.Config // what runs now; updated with what was applied
	// shape is the running pool's; pending, when set, is the options of the pool the next
	// reset starts instead (a new shape), and before the workers settings it replaced.
	shape   shape
	pending *pool.Options
	before  config.Workers
}

// apply applies next, or logs why it cannot. It returns whether anything was applied.
func (r *reloader) apply(next config.Config, loadErr error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if loadErr != nil {
		r.log.Error("config reload failed: the running config stays", "err", loadErr)
		return false
	}
	old := *r.running
	restart := restartKeys(old, next)
	applied := []string{}
	if workerKeysChanged(old, next) {
		setter, ok := r.pool.(optionSetter)
		if !ok {
			restart = append(restart, "workers (this build's pool cannot take new worker settings)")
		} else if what, err := r.applyWorkers(setter, next); err != nil {
			r.log.Error("config reload failed: the running config stays", "err", err)
			return false
		} else {
			applied = append(applied, what)
			r.running.Workers = next.Workers
		}
	}
	if old.Workers.StopTimeout != next.Workers.StopTimeout {
		r.running.Workers.StopTimeout = next.Workers.StopTimeout
		applied = append(applied, "workers.stop_timeout")
	}
	if old.Log.Level != next.Log.Level && r.level != nil {
		if err := r.level.UnmarshalText([]byte(next.Log.Level)); err == nil {
			r.running.Log.Level = next.Log.Level
			applied = append(applied, "log.level")
		}
	}
	if (old.Log.Access != next.Log.Access || old.Log.AccessFile != next.Log.AccessFile) && r.access != nil {
		if err := r.access(next.Log); err != nil {
			r.log.Error("config reload: the access log stays where it was", "err", err)
		} else {
			r.running.Log.Access, r.running.Log.AccessFile = next.Log.Access, next.Log.AccessFile
			applied = append(applied, "log.access")
		}
	}
	if len(restart) > 0 {
		r.log.Warn("config reload: these keys changed but need a restart to take effect", "keys", restart)
	}
	r.log.Info("config reloaded", "applied", applied)
	return len(applied) > 0
}

// applyWorkers hands next's worker settings to the pool, or, when they change its shape, keeps
// them for the next reset to start a new pool on. It says which it did.
func (r *reloader) applyWorkers(setter optionSetter, next config.Config) (string, error) {
	if st, err := os.Stat(next.Workers.Dir); err != nil || !st.IsDir() {
		return "", fmt.Errorf("workers.dir: %q is not a directory", next.Workers.Dir)
	}
	wo, err := r.workerOptions(next)
	if err != nil {
		return "", err
	}
	o := r.poolOptions(next, wo)
	if shapeOf(next.Workers) != r.shape {
		if r.pending == nil {
			r.before = r.running.Workers
		}
		r.pending = &o
		return "workers (new workers.count or workers.concurrency: a new pool)", nil
	}
	if err := setter.SetOptions(o); err != nil {
		return "", fmt.Errorf("the pool refused the new worker settings: %w", err)
	}
	r.pending = nil // an edit that went back to the running shape
	return "workers", nil
}

// resetWorkers replaces every worker: with a new pool when a reload changed the pool's shape,
// otherwise one at a time in the running pool. A new pool that cannot start leaves the running
// one and its settings as they were; the next reload tries again.
func (r *reloader) resetWorkers(ctx context.Context, live *livePool) error {
	r.mu.Lock()
	o, drain := r.pending, time.Duration(r.running.Workers.StopTimeout)
	r.pending = nil
	r.mu.Unlock()
	if o == nil {
		return live.Reset(ctx)
	}
	err := live.Replace(ctx, *o, drain)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.running.Workers = r.before
		return err
	}
	r.shape = shape{o.Size, max(o.Concurrency, 1)}
	return nil
}
