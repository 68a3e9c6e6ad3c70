// Package daemon owns the lifecycle of a running Peregrine server: it turns a Config into a
// worker pool (and, with workers.fork, the template its workers are forked from), the HTTP
// listener, the admin listener and the file watcher, wires them top to bottom, serves until
// asked to stop, replaces the workers on request (SIGHUP, admin, watch) and drains on stop. It
// holds no request logic of its own.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/peregrinephp/peregrine/internal/admin"
	"github.com/peregrinephp/peregrine/internal/compress"
	"github.com/peregrinephp/peregrine/internal/config"
	"github.com/peregrinephp/peregrine/internal/docroot"
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
	// Banner receives the one line that says where the server listens; when nil, that line is
	// a record of Logger (log.format json).
	Banner io.Writer
	// Reset delivers a value for every request to replace all workers (SIGHUP).
	Reset <-chan os.Signal
	// Reload, if set, reads the config file again (SIGHUP; reload.go), with the command line
	// applied over it as at start. Nil when the server runs without a file.
	Reload func() (config.Config, error)
	// Level is the logger's level, which a reload may change; nil keeps it fixed.
	Level *slog.LevelVar
	// Force, once closed after ctx is cancelled, ends the graceful stop at once: in-flight
	// requests fail and the workers are killed (a second SIGINT).
	Force <-chan struct{}
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
	// Made first: PHP's own upload files go there too (workerArgv's upload_tmp_dir).
	uploadDir, swept, err := httpserver.UploadDir("")
	if err != nil {
		return err
	}
	defer func() { _ = httpserver.RemoveUploadDir(uploadDir) }()
	if swept > 0 {
		log.Info("removed the upload directories of servers that are no longer running", "count", swept)
	}
	argv, native, err := workerArgv(cfg, uploadDir)
	if err != nil {
		return err
	}
	if !native && !worker.IsPHP(argv[0]) && len(cfg.Workers.PHPIni) > 2 {
		log.Warn("workers.php_ini is ignored: workers.command does not run php directly", "command", argv[0])
	}
	var root *docroot.Root
	if cfg.HTTP.Root != "" {
		if root, err = docroot.New(cfg.HTTP.Root, docroot.Options{Index: cfg.HTTP.Index, Encodings: cfg.HTTP.Compression}); err != nil {
			return fmt.Errorf("http.root: %w", err)
		}
		if err := CheckReadable(cfg.HTTP.Root); err != nil {
			// Not fatal: the root may become readable (a mount, a deploy); each request that
			// cannot read it answers 403 or 404, so say why once here.
			log.Warn("http.root cannot be read by this process: requests for its files will fail", "root", cfg.HTTP.Root, "err", err)
		}
	}
	sendfileDirs := make([]string, 0, len(cfg.HTTP.SendfileDirs))
	for _, dir := range cfg.HTTP.SendfileDirs {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return fmt.Errorf("http.sendfile_dirs: %w", err)
		}
		sendfileDirs = append(sendfileDirs, abs)
	}
	if st, err := os.Stat(cfg.Workers.Dir); err != nil || !st.IsDir() {
		return fmt.Errorf("workers.dir: %q is not a directory", cfg.Workers.Dir)
	}
	tbl, err := startTables(ctx, cfg, log) // tables.go: before any worker, removed after the last
	if err != nil {
		return err
	}
	defer tbl.remove(log)
	bg, err := startBackground(ctx, cfg, log) // jobs.go: pipelines, kv stores, the call socket
	if err != nil {
		return err
	}
	defer bg.close()
	wsk, err := prepareWebSockets(cfg, bg, log) // websocket.go: nil in classic mode
	if err != nil {
		return err
	}
	defer wsk.close(context.Background()) // a no-op after the drain below

	// Metrics are counted only when the admin listener can serve them.
	var metrics *admin.Metrics
	var poolObs pool.Observer
	var httpObs httpserver.Observer
	if cfg.Admin.Address != "" {
		metrics = admin.NewMetrics()
		poolObs, httpObs = metrics, metrics
	}
	if cfg.HTTP.Root != "" {
		httpObs = &rootCheck{root: cfg.HTTP.Root, log: log, next: httpObs}
	}

	phpOutput := newPHPLog(log.Handler()) // phplog.go: fatals at ERROR, traces whole, boot lines once
	workerOpts := worker.Options{
		Argv:        argv,
		Dir:         cfg.Workers.Dir,
		Env:         append(append(append(workerEnv(cfg), tbl.Env()...), bg.Env()...), wsk.Env()...),
		BootTimeout: time.Duration(cfg.Workers.BootTimeout),
		Logger:      slog.New(phpOutput),
	}
	var direct *directFront // direct.go: the workers answer HTTP themselves
	eventOpts := workerOpts // websocket.go: direct mode's WebSocket events run on exchange workers
	if cfg.HTTP.Direct {
		if direct, err = listenDirect(cfg.HTTP.Address, cfg.Workers.ResolvedCount()); err != nil {
			return err
		}
		defer func() { _ = direct.close() }()
		workerOpts.ExtraFiles = []*os.File{direct.file}
		workerOpts.Env = append(workerOpts.Env, direct.env(cfg)...)
		if cfg.Workers.Fork {
			log.Info("http.direct: the workers are executed, not forked (workers.fork is not used in direct mode)")
		}
	}
	if cfg.Workers.Fork && direct == nil { // Validate has checked that argv is the native runtime's
		tmpl, err := worker.StartTemplate(ctx, workerOpts)
		if err != nil {
			return fmt.Errorf("workers.fork: the template the workers are forked from could not start: %w", err)
		}
		defer tmpl.Close() // after p.Stop below: the workers go first
		workerOpts.Template = tmpl
	}
	access := newAccessLogs(log) // logs.go
	if err := access.apply(cfg.Log); err != nil {
		return err
	}
	defer access.close()
	count := cfg.Workers.ResolvedCount()
	p := newLivePool(poolOptions(cfg, count, workerOpts, log, poolObs), native, log) // livepool.go
	reload := &reloader{log: log, level: opts.Level, pool: p, running: &cfg, shape: shapeOf(cfg.Workers), access: access.apply,
		workerOptions: func(c config.Config) (worker.Options, error) {
			argv, _, err := workerArgv(c, uploadDir)
			if err != nil {
				return worker.Options{}, err
			}
			wo := workerOpts // the template stays: workers.fork needs a restart
			wo.Argv, wo.Dir, wo.BootTimeout = argv, c.Workers.Dir, time.Duration(c.Workers.BootTimeout)
			wo.Env = append(append(append(workerEnv(c), tbl.Env()...), bg.Env()...), wsk.Env()...)
			if direct != nil {
				wo.Env = append(wo.Env, direct.env(c)...)
			}
			return wo, nil
		},
		poolOptions: func(c config.Config, wo worker.Options) pool.Options {
			return poolOptions(c, c.Workers.ResolvedCount(), wo, log, poolObs)
		},
	}
	wsMax := cfg.WebSocket.MaxConnections
	if direct != nil && wsMax == 0 {
		// No front holds the connections the workers hand over in direct mode:
		// http.max_connections (or its default from the descriptors) caps them instead.
		wsMax = httpserver.MaxConnections(cfg.HTTP.MaxConnections, count)
	}
	if err := wsk.start(ctx, wsk.eventPool(ctx, p, poolOptions(cfg, count, eventOpts, log, poolObs), native), wsMax); err != nil {
		return err
	}
	handler := httpserver.NewHandler(p, httpserver.Options{
		TempDir: uploadDir,
		Limits: httpserver.Limits{
			MaxHeaderCount: cfg.HTTP.MaxHeaderCount,
			MaxHeaderLine:  int(cfg.HTTP.MaxHeaderLine),
			MaxCookies:     cfg.HTTP.MaxCookies,
			MaxInputVars:   cfg.HTTP.MaxInputVars,
		},
		MaxBodySize: int64(cfg.HTTP.MaxBodySize),
		// The native runtime's PHP parses bodies itself, as under PHP-FPM; concurrent requests
		// run in the PHP library's loop, which takes the fields and files the server parsed.
		ParseMultipart: !native || cfg.Workers.Concurrency > 1, // after a reload, p's ParseMultipart
		Root:           root,
		SendfileDirs:   sendfileDirs,
		Classic:        len(cfg.Workers.Command) == 0,
		ServerName:     cfg.HTTP.ServerName,
		WriteTimeout:   time.Duration(cfg.HTTP.WriteTimeout),
		BodyTimeout:    time.Duration(cfg.HTTP.BodyTimeout),
		AccessLog:      access.out,
		Logger:         log,
		Observer:       httpObs,
		TrustedProxies: cfg.HTTP.TrustedPrefixes(),
		WebSocket:      wsk.upgrader(),
	})
	wsk.serveHandoff(handler, time.Duration(cfg.HTTP.ReadHeaderTimeout)) // direct mode's upgrades
	var srv interface {
		Serve() error
		URL() string
		Shutdown(context.Context) error
	} = direct
	if direct == nil {
		// Compression wraps the whole handler: PHP's answers and static files alike.
		s, err := httpserver.Listen(cfg.HTTP.Address, compress.Compress(handler, cfg.HTTP.Compression), httpserver.ServerOptions{
			ReadHeaderTimeout: time.Duration(cfg.HTTP.ReadHeaderTimeout),
			IdleTimeout:       time.Duration(cfg.HTTP.IdleTimeout),
			BodyTimeout:       time.Duration(cfg.HTTP.BodyTimeout),
			WriteTimeout:      time.Duration(cfg.HTTP.WriteTimeout),
			MaxBodySize:       int64(cfg.HTTP.MaxBodySize),
			Limits:            httpserver.Limits{MaxHeaderCount: cfg.HTTP.MaxHeaderCount, MaxHeaderLine: int(cfg.HTTP.MaxHeaderLine)},
			Logger:            log,
			MaxConnections:    httpserver.MaxConnections(cfg.HTTP.MaxConnections, count),
			TLS:               tlsOptions(cfg.HTTP), // front.go; nil serves cleartext (and h2c)
		})
		if err != nil {
			return err
		}
		srv = s
	}
	defer func() { _ = srv.Shutdown(context.Background()) }() // a no-op after the drain below

	var adm *admin.Server
	if cfg.Admin.Address != "" {
		// peregrine reset (POST /reset) is SIGHUP's reload and reset, the access log aside.
		resetPool := serverPool{livePool: p, reset: func(ctx context.Context) error {
			if opts.Reload != nil {
				reload.apply(opts.Reload())
			}
			if err := reload.resetWorkers(ctx, p); err != nil {
				return err
			}
			return wsk.resetEvents(ctx)
		}}
		admPool := bg.adminPool(resetPool)
		if direct != nil {
			admPool = wsk.adminPool(directAdminPool{Pool: admPool, stats: direct.stats}) // websocket.go: its event workers too
			if err := metrics.Register(newDirectCollector(direct.stats)); err != nil {
				return err
			}
		}
		adm, err = admin.Listen(cfg.Admin.Address, admin.Options{Pool: admPool, Metrics: metrics, Logger: log, Token: cfg.Admin.Token, Tables: tbl.admin(),
			Jobs: bg.adminJobs(), WebSocket: wsk.admin()})
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

	err = p.Start(ctx)
	phpOutput.endBoot()
	if err != nil {
		return fmt.Errorf("the PHP workers could not start (%s): %w", cfg.Workers.Command, summarizeStart(err, count))
	}
	if err := bg.startConsumers(ctx, cfg, workerOpts, uploadDir); err != nil {
		p.Stop(ctx)
		return err
	}
	if adm != nil {
		adm.SetStarted()
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	if direct != nil { // direct.go: the daemon's exec_timeout, behind the workers' own
		backstopCtx, stopBackstop := context.WithCancel(ctx)
		defer stopBackstop()
		go direct.stats.backstop(backstopCtx, p, directLimits(reload), log)
	}
	banner := fmt.Sprintf("peregrine %s serving %s with %d workers (PHP %s)", Version, srv.URL(), count, p.PHPVersion())
	if opts.Banner != nil {
		fmt.Fprintln(opts.Banner, banner)
	} else {
		log.Info(banner, "url", srv.URL(), "workers", count, "php", p.PHPVersion(), "version", Version)
	}
	// memory.go: what only the start used goes back now, a burst's garbage once it is over.
	releaseStartupMemory(log)
	trimCtx, stopTrim := context.WithCancel(ctx)
	defer stopTrim()
	go trimWhenIdle(trimCtx, idlePeriod, 1<<20)

	resets := make(chan string, 1)
	resetDone := make(chan struct{})
	go func() { // requests that arrive during a reset fold into one more reset after it
		defer close(resetDone)
		for why := range resets {
			start := time.Now()
			log.Info("replacing all workers", "cause", why)
			if err := reload.resetWorkers(ctx, p); err != nil {
				log.Error("reset incomplete", "err", err)
				continue
			}
			if err := wsk.resetEvents(ctx); err != nil {
				log.Error("reset of the WebSocket event workers incomplete", "err", err)
				continue
			}
			if err := bg.reset(ctx); err != nil { // jobs.go: the consumers too
				log.Error("reset of the job consumers incomplete", "err", err)
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
			if opts.Reload != nil {
				reload.apply(opts.Reload())
			}
			if err := access.reopen(); err != nil {
				log.Error("reopening the access log failed; it goes on to the old file", "err", err)
			}
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

	// One budget for the whole stop: in-flight requests, then the workers.
	log.Info("stopping: draining in-flight requests", "stop_timeout", time.Duration(cfg.Workers.StopTimeout).String())
	stopCtx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.Workers.StopTimeout))
	defer cancel()
	if opts.Force != nil {
		go func() {
			select {
			case <-opts.Force:
				cancel()
			case <-stopCtx.Done():
			}
		}()
	}
	go func() { // requests still running when the budget ends fail with their killed workers
		<-stopCtx.Done()
		p.Stop(stopCtx)
	}()
	consumersStopped := make(chan struct{}) // jobs drain beside requests, in the same budget
	go func() { bg.stopConsumers(stopCtx); close(consumersStopped) }()
	// WebSockets and event streams end as the drain begins (Shutdown would wait for the
	// streams), each onClose on the workers that are still running.
	wsClosed := make(chan struct{})
	go func() { wsk.close(stopCtx); close(wsClosed) }()
	if err := srv.Shutdown(stopCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		log.Warn("http shutdown", "err", err)
	}
	<-wsClosed
	<-resetDone
	p.Stop(stopCtx)
	<-consumersStopped
	log.Info("stopped")
	return serveErr
}

// CheckReadable reports whether this process can list the directory dir (the document root).
func CheckReadable(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Readdirnames(1); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: %w", dir, err)
	}
	return nil
}

// NativeRuntime says where the native runtime is and which PHP it embeds, for peregrine version.
func NativeRuntime() string {
	path, err := worker.LookNative()
	if err != nil {
		return "not found (build it with: make build)"
	}
	version := "8.2"
	if out, err := exec.Command("php-config8.2", "--version").Output(); err == nil {
		version = strings.TrimSpace(string(out)) // the libphp8.2-embed it links
	}
	return path + " (PHP " + version + ")"
}

// workerArgv returns the command that starts one worker, and whether it is the native runtime.
// Classic mode (a root, no command) runs the native runtime without a script; a command that
// runs php runs it under the configured runtime; any other command runs as it is. PHP gets
// upload_tmp_dir=uploadDir unless workers.php_ini sets it.
func workerArgv(cfg config.Config, uploadDir string) ([]string, bool, error) {
	ini := worker.WithUploadDir(cfg.Workers.PHPIniArgs(), uploadDir)
	command := cfg.Workers.Command
	switch {
	case len(command) == 0: // classic mode; Validate has checked the root and the runtime
		native, err := worker.LookNative()
		return append([]string{native}, ini...), true, err
	case cfg.Workers.Runtime == "native" && worker.IsPHP(command[0]):
		native, err := worker.LookNative()
		return append(append([]string{native}, ini...), command[1:]...), true, err
	}
	argv := worker.PHPArgv(command, ini)
	_, err := worker.LookPath(argv[0])
	return argv, false, err
}

// workerEnv is the environment every worker starts with: the server's own (only its PATH and
// PEREGRINE_* variables under workers.clear_env), the protocol marker, and workers.env on top.
func workerEnv(cfg config.Config) []string {
	env := os.Environ()
	if cfg.Workers.ClearEnv {
		env = slices.DeleteFunc(env, func(kv string) bool {
			return !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "PEREGRINE_")
		})
	}
	env = append(env, "PEREGRINE_PROTOCOL=3")
	if cfg.Workers.Concurrency > 1 {
		env = append(env, fmt.Sprintf("PEREGRINE_CONCURRENCY=%d", cfg.Workers.Concurrency))
	}
	if cfg.HTTP.ServerName != "" {
		env = append(env, "PEREGRINE_SERVER_NAME="+cfg.HTTP.ServerName)
	}
	if cfg.Log.Level == "debug" {
		env = append(env, "PEREGRINE_DEBUG=1")
	}
	if cfg.Workers.DebugLeaks {
		env = append(env, "PEREGRINE_DEBUG_LEAKS=1")
	}
	for k, v := range cfg.Workers.Env {
		env = append(env, k+"="+v)
	}
	return env
}
