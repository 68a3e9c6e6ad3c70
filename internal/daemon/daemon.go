// Package daemon owns the lifecycle of a running Peregrine server: it turns a Config into a
// worker pool, the HTTP listener, the admin listener and the file watcher, wires them top to
// bottom, serves until asked to stop, replaces the workers on request (SIGHUP, admin, watch)
// and drains on stop. It holds no request logic of its own.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/peregrinephp/peregrine/internal/admin"
	"github.com/peregrinephp/peregrine/internal/config"
	"github.com/peregrinephp/peregrine/internal/httpserver"
	"github.com/peregrinephp/peregrine/internal/pool"
	"github.com/peregrinephp/peregrine/internal/watch"
	"github.com/peregrinephp/peregrine/internal/worker"
)

// Version is Peregrine's version.
const Version = "0.1.0"

// Options are what Run needs besides the config.
type Options struct {
	Logger *slog.Logger
	// Banner receives the one line that says where the server listens.
	Banner io.Writer
	// Reset delivers a value for every request to replace all workers (SIGHUP).
	Reset <-chan os.Signal
}

// Run serves until ctx is cancelled, then stops gracefully: it stops accepting, lets in-flight
// requests finish for up to workers.stop_timeout, stops the workers and returns nil. Errors
// that keep the server from starting (port in use, PHP missing, a worker script that cannot
// boot) are returned at once.
func Run(ctx context.Context, cfg config.Config, opts Options) error {
	log := opts.Logger
	if err := cfg.Validate(); err != nil {
		return err
	}
	argv := worker.PHPArgv(cfg.Workers.Command, cfg.Workers.PHPIniArgs())
	if _, err := worker.LookPath(argv[0]); err != nil {
		return err
	}
	if !worker.IsPHP(argv[0]) && len(cfg.Workers.PHPIni) > 1 {
		log.Warn("workers.php_ini is ignored: workers.command does not run php directly", "command", argv[0])
	}
	if st, err := os.Stat(cfg.Workers.Dir); err != nil || !st.IsDir() {
		return fmt.Errorf("workers.dir: %q is not a directory", cfg.Workers.Dir)
	}

	// Metrics are counted only when the admin listener can serve them.
	var metrics *admin.Metrics
	var poolObs pool.Observer
	var httpObs httpserver.Observer
	if cfg.Admin.Address != "" {
		metrics = admin.NewMetrics()
		poolObs, httpObs = metrics, metrics
	}

	count := cfg.Workers.ResolvedCount()
	p := pool.New(pool.Options{
		Size: count,
		Worker: worker.Options{
			Argv:        argv,
			Dir:         cfg.Workers.Dir,
			Env:         workerEnv(cfg),
			BootTimeout: time.Duration(cfg.Workers.BootTimeout),
			Logger:      log,
		},
		MaxJobs:         cfg.Workers.MaxJobs,
		MaxMemory:       int64(cfg.Workers.MaxMemory),
		ExecTimeout:     time.Duration(cfg.Workers.ExecTimeout),
		AllocateTimeout: time.Duration(cfg.Workers.AllocateTimeout),
		MaxQueue:        cfg.Workers.MaxQueue,
		StopTimeout:     time.Duration(cfg.Workers.StopTimeout),
		Logger:          log,
		Observer:        poolObs,
	})
	handler := httpserver.NewHandler(p, httpserver.Options{
		MaxBodySize: int64(cfg.HTTP.MaxBodySize),
		AccessLog:   cfg.Log.Access,
		Logger:      log,
		Observer:    httpObs,
	})
	srv, err := httpserver.Listen(cfg.HTTP.Address, handler, httpserver.ServerOptions{
		ReadHeaderTimeout: time.Duration(cfg.HTTP.ReadHeaderTimeout),
		IdleTimeout:       time.Duration(cfg.HTTP.IdleTimeout),
		Logger:            log,
	})
	if err != nil {
		return err
	}
	defer func() { _ = srv.Shutdown(context.Background()) }() // a no-op after the drain below

	var adm *admin.Server
	if cfg.Admin.Address != "" {
		adm, err = admin.Listen(cfg.Admin.Address, admin.Options{Pool: p, Metrics: metrics, Logger: log})
		if err != nil {
			return err
		}
		defer func() { // last, so that /metrics and /ready answer while the server drains
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := adm.Shutdown(ctx); err != nil {
				log.Warn("admin shutdown", "err", err)
			}
		}()
		log.Info("admin listener started", "address", adm.Addr().String())
		go func() {
			if err := adm.Serve(); err != nil {
				log.Error("admin listener stopped", "err", err)
			}
		}()
	}

	var changes <-chan watch.Change
	if len(cfg.Workers.Watch) > 0 {
		w, err := watch.New(cfg.Workers.Dir, cfg.Workers.Watch, watch.DefaultQuiet)
		if err != nil {
			return err
		}
		watchCtx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		changes = w.Run(watchCtx)
	}

	if err := p.Start(ctx); err != nil {
		return fmt.Errorf("the PHP workers could not start (%s): %w", cfg.Workers.Command, err)
	}
	if adm != nil {
		adm.SetStarted()
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	if opts.Banner != nil {
		fmt.Fprintf(opts.Banner, "peregrine %s serving http://%s with %d workers (PHP %s)\n",
			Version, srv.Addr(), count, p.PHPVersion())
	}

	resets := make(chan string, 1)
	resetDone := make(chan struct{})
	go func() { // requests that arrive during a reset fold into one more reset after it
		defer close(resetDone)
		for why := range resets {
			start := time.Now()
			log.Info("replacing all workers", "cause", why)
			if err := p.Reset(ctx); err != nil {
				log.Error("reset incomplete", "err", err)
				continue
			}
			log.Info("all workers replaced", "duration", time.Since(start).Round(time.Millisecond).String())
		}
	}()
	requestReset := func(why string) {
		select {
		case resets <- why:
		default:
		}
	}

	var serveErr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-opts.Reset:
			requestReset("SIGHUP")
		case c := <-changes:
			log.Info("watched file changed", "file", c.Path, "events", c.Count)
			requestReset("file change: " + c.Path)
		case serveErr = <-served:
			break loop
		}
	}
	close(resets)
	if adm != nil {
		adm.SetDraining()
	}

	log.Info("stopping: draining in-flight requests", "stop_timeout", time.Duration(cfg.Workers.StopTimeout).String())
	drainCtx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.Workers.StopTimeout))
	defer cancel()
	if err := srv.Shutdown(drainCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		log.Warn("http shutdown", "err", err)
	}
	<-resetDone
	p.Stop()
	log.Info("stopped")
	return serveErr
}

// workerEnv is the environment every worker starts with: the server's own, the protocol marker,
// and workers.env on top.
func workerEnv(cfg config.Config) []string {
	env := append(os.Environ(), "PEREGRINE_PROTOCOL=1")
	if cfg.Log.Level == "debug" {
		env = append(env, "PEREGRINE_DEBUG=1")
	}
	for k, v := range cfg.Workers.Env {
		env = append(env, k+"="+v)
	}
	return env
}
