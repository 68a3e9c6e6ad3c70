package daemon

import (
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"time"

	"github.com/peregrinephp/peregrine/internal/config"
	"github.com/peregrinephp/peregrine/internal/pool"
	"github.com/peregrinephp/peregrine/internal/worker"
)

// Reload on SIGHUP (as php-fpm and Caddy do): the daemon reads the config file again through
// Options.Reload. What a running server can take is applied: the workers' settings (handed to
// the pool, then every worker is replaced, as SIGHUP always did), the pool's limits,
// workers.stop_timeout, log.level, log.access and log.access_file. What needs a restart (the
// listeners, the workers' count and mode, tables, jobs, log.format) is logged by key and left
// as it runs. An invalid file changes nothing: the error is logged and the running config stays.

// optionSetter is what the daemon needs from the pool to apply a reload: new options for the
// workers started from now on (the reset that follows replaces all of them) and new limits for
// the requests to come. Size, Concurrency, Logger and Observer do not change. The pool does not
// have it yet; until it does, a reload that changes workers.* other than stop_timeout says it
// needs a restart.
type optionSetter interface {
	SetOptions(o pool.Options) error
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
	diff("log.format", old.Log.Format, next.Log.Format)
	diff("workers.count", old.Workers.ResolvedCount(), next.Workers.ResolvedCount())
	diff("workers.concurrency", old.Workers.Concurrency, next.Workers.Concurrency)
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
type reloader struct {
	log     *slog.Logger
	level   *slog.LevelVar         // nil: the level is fixed
	access  func(config.Log) error // points the access log where log.access and access_file say; nil: fixed
	pool    any                    // an optionSetter once the pool has SetOptions
	running *config.Config         // what runs now; updated with what was applied
	// workerOptions builds the options of the workers for a config (daemon.Run's).
	workerOptions func(config.Config) (worker.Options, error)
	poolOptions   func(config.Config, worker.Options) pool.Options
}

// apply applies next, or logs why it cannot. It returns whether anything was applied.
func (r *reloader) apply(next config.Config, loadErr error) bool {
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
		} else if err := r.applyWorkers(setter, next); err != nil {
			r.log.Error("config reload failed: the running config stays", "err", err)
			return false
		} else {
			applied = append(applied, "workers")
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

func (r *reloader) applyWorkers(setter optionSetter, next config.Config) error {
	if st, err := os.Stat(next.Workers.Dir); err != nil || !st.IsDir() {
		return fmt.Errorf("workers.dir: %q is not a directory", next.Workers.Dir)
	}
	wo, err := r.workerOptions(next)
	if err != nil {
		return err
	}
	if err := setter.SetOptions(r.poolOptions(next, wo)); err != nil {
		return fmt.Errorf("the pool refused the new worker settings: %w", err)
	}
	return nil
}
