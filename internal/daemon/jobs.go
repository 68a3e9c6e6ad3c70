package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/peregrinephp/peregrine/internal/admin"
	"github.com/peregrinephp/peregrine/internal/config"
	"github.com/peregrinephp/peregrine/internal/jobs"
	"github.com/peregrinephp/peregrine/internal/kv"
	"github.com/peregrinephp/peregrine/internal/phpcall"
	"github.com/peregrinephp/peregrine/internal/pool"
	"github.com/peregrinephp/peregrine/internal/protocol"
	"github.com/peregrinephp/peregrine/internal/worker"
)

// background is the server's jobs and key-value stores (docs/jobs.md): the pipelines, the
// stores, the socket PHP calls them through and the consumer pool; nil without jobs.pipelines
// and kv.stores.
type background struct {
	set       *jobs.Set
	stores    map[string]kv.Store
	calls     *phpcall.Server
	consumers *pool.Pool
	stop      context.CancelFunc // ends the consume loops
	loops     sync.WaitGroup
	closeOnce sync.Once
	log       *slog.Logger
}

// startBackground connects every pipeline's driver and every store, and opens the socket the
// workers call them through. The caller closes it when the server stops.
func startBackground(ctx context.Context, cfg config.Config, log *slog.Logger) (b *background, err error) {
	if len(cfg.Jobs.Pipelines) == 0 && len(cfg.KV.Stores) == 0 {
		return nil, nil
	}
	b = &background{set: jobs.NewSet(), stores: map[string]kv.Store{}, log: log, stop: func() {}}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	for _, pc := range cfg.Jobs.Pipelines {
		var d jobs.Driver
		switch pc.Driver {
		case "memory":
			d = jobs.NewMemory()
		case "redis":
			d, err = jobs.NewRedis(ctx, jobs.RedisOptions{Address: pc.Redis.Address, Stream: pc.ResolvedRedisStream(),
				Timeout: time.Duration(pc.Timeout)})
		case "nats":
			d, err = jobs.NewNATS(ctx, jobs.NATSOptions{URL: pc.NATS.URL, Stream: pc.ResolvedNATSStream(),
				Timeout: time.Duration(pc.Timeout)})
		}
		if err != nil {
			return nil, fmt.Errorf("jobs.pipelines.%s: %w", pc.Name, err)
		}
		b.set.Add(jobs.New(jobs.Options{Name: pc.Name, Driver: d, Retries: pc.Retries, Backoff: time.Duration(pc.Backoff),
			DeadLetter: pc.DeadLetter, Timeout: time.Duration(pc.Timeout), Prefetch: pc.Prefetch, Logger: log}), pc.Driver)
	}
	for _, sc := range cfg.KV.Stores {
		var s kv.Store = kv.NewMemory()
		if sc.Driver == "redis" {
			_ = s.Close()
			if s, err = kv.NewRedis(ctx, sc.Address, "peregrine:kv:"+sc.Name+":"); err != nil {
				return nil, fmt.Errorf("kv.stores.%s: redis %s: %w", sc.Name, sc.Address, err)
			}
		}
		b.stores[sc.Name] = s
	}
	if b.calls, err = phpcall.Listen("", phpcall.Options{Jobs: b.set, Stores: b.stores, Logger: log}); err != nil {
		return nil, err
	}
	if len(cfg.Jobs.Consumers.Command) == 0 && len(cfg.Jobs.Pipelines) > 0 {
		log.Info("jobs.consumers.command is not set: this server pushes jobs and runs none")
	}
	return b, nil
}

// Env is what every worker and consumer gets to find the socket.
func (b *background) Env() []string {
	if b == nil {
		return nil
	}
	return []string{phpcall.EnvVar + "=" + b.calls.Path()}
}

// Jobs returns the pipelines, or nil.
func (b *background) Jobs() *jobs.Set {
	if b == nil {
		return nil
	}
	return b.set
}

// startConsumers boots the consumer pool (jobs.consumers) and starts the consume loops of
// every pipeline it takes jobs from. base is the workers' options: the consumers share their
// directory, boot timeout and logger, and the call socket.
func (b *background) startConsumers(ctx context.Context, cfg config.Config, base worker.Options, uploadDir string) error {
	if b == nil || len(cfg.Jobs.Consumed()) == 0 {
		return nil
	}
	cs := cfg.Jobs.Consumers
	ccfg := cfg
	ccfg.Workers.Command = cs.Command
	ccfg.Workers.Concurrency = 1 // a consumer runs one job at a time, whatever the workers do
	ccfg.Workers.Fork = false    // and is executed, never forked
	ccfg.Workers.PHPIni = maps.Clone(cfg.Workers.PHPIni)
	maps.Copy(ccfg.Workers.PHPIni, cs.PHPIni)
	ccfg.Workers.Env = maps.Clone(cfg.Workers.Env)
	if ccfg.Workers.Env == nil {
		ccfg.Workers.Env = map[string]string{}
	}
	maps.Copy(ccfg.Workers.Env, cs.Env)
	argv, _, err := workerArgv(ccfg, uploadDir)
	if err != nil {
		return fmt.Errorf("jobs.consumers.command: %w", err)
	}
	var longest time.Duration
	for _, pc := range cfg.Jobs.Consumed() {
		longest = max(longest, time.Duration(pc.Timeout))
	}
	opts := base
	opts.Argv = argv
	opts.Env = append(workerEnv(ccfg), b.Env()...)
	opts.Template = nil   // consumers are executed, never forked
	opts.ExtraFiles = nil // and never hold direct mode's listening socket
	count := cs.ResolvedCount()
	b.consumers = pool.New(pool.Options{
		Size:        count,
		Worker:      opts,
		MaxJobs:     cs.MaxJobs,
		MaxMemory:   int64(cs.MaxMemory),
		ExecTimeout: longest, // from the moment a consumer takes the job, not while it waits
		StopTimeout: time.Duration(cfg.Workers.StopTimeout),
		Logger:      b.log.With("pool", "consumers"),
	})
	if err := b.consumers.Start(ctx); err != nil {
		return fmt.Errorf("the job consumers could not start (%s): %w", strings.Join(cs.Command, " "), err)
	}
	loopCtx, stop := context.WithCancel(context.Background())
	b.stop = stop
	var names []string
	for _, pc := range cfg.Jobs.Consumed() {
		names = append(names, pc.Name)
	}
	b.loops.Go(func() { b.set.Consume(loopCtx, names, count, b.runJob) })
	b.log.Info("job consumers started", "count", count, "pipelines", len(cfg.Jobs.Consumed()))
	return nil
}

// jobAnswer keeps what a consumer answered for a job: its status and the start of its body,
// which says why it failed.
type jobAnswer struct {
	status     int
	body       []byte
	retryAfter string // x-peregrine-job-retry-after: the consumer's delay before the retry, seconds
	done       bool   // x-peregrine-job: done, the consumer returned from the job
	fatal      string // x-peregrine-job-error: the message of the fatal error that ended the job
}

const maxJobError = 2048

// Frame implements worker.Answer.
func (a *jobAnswer) Frame(t protocol.Type, _ uint16, payload []byte) error {
	switch t {
	case protocol.TypeResponse:
		r, err := protocol.DecodeResponse(payload)
		if err != nil {
			return err
		}
		a.status = r.Status
		for _, h := range r.Headers {
			switch {
			case strings.EqualFold(h.Name, "x-peregrine-job-retry-after"):
				a.retryAfter = h.Value
			case strings.EqualFold(h.Name, "x-peregrine-job") && h.Value == "done":
				a.done = true
			case strings.EqualFold(h.Name, "x-peregrine-job-error"):
				a.fatal = h.Value[:min(len(h.Value), maxJobError)]
			}
		}
		a.body = append(a.body, r.Body[:min(len(r.Body), maxJobError)]...)
	case protocol.TypeBody:
		if n := maxJobError - len(a.body); n > 0 {
			a.body = append(a.body, payload[:min(len(payload), n)]...)
		}
	}
	return nil
}

// runJob hands a job to a consumer as a JOB request (docs/protocol.md): path /PIPELINE, the
// job's id, attempt and headers in x-peregrine-job-* headers, the payload as body. A 2xx answer
// with x-peregrine-job: done is success (a 2xx without it is a script that exit()ed or die()d
// mid-job); any other status, a crash (502) or the timeout (504) is a failure, retried after
// the pipeline's backoff or, when the answer has x-peregrine-job-retry-after: SECONDS, after that.
// A job no consumer took (the pool answered 503: none can boot, or it stops) is no attempt:
// jobs.ErrNotBegun gives it back.
func (b *background) runJob(ctx context.Context, j *jobs.Job) error {
	headers := []protocol.Field{
		{Name: "content-type", Value: "application/json"},
		{Name: "content-length", Value: strconv.Itoa(len(j.Payload))},
		{Name: "x-peregrine-job-id", Value: j.ID},
		{Name: "x-peregrine-job-pipeline", Value: j.Pipeline},
		{Name: "x-peregrine-job-attempt", Value: strconv.Itoa(j.Attempt)},
	}
	if len(j.Headers) > 0 {
		hb, _ := json.Marshal(j.Headers)
		headers = append(headers, protocol.Field{Name: "x-peregrine-job-headers", Value: string(hb)})
	}
	frame, err := protocol.AppendRequest(nil, 0, &protocol.Request{
		Method: "JOB", URI: "/" + j.Pipeline, Path: "/" + j.Pipeline, Protocol: "HTTP/1.1", Scheme: "http",
		RemoteAddr: "127.0.0.1", RemotePort: "0", ServerAddr: "127.0.0.1", ServerPort: "0",
		Headers: headers, Body: []byte(j.Payload),
	})
	if err != nil {
		return fmt.Errorf("the job cannot be sent to a consumer: %w", err)
	}
	ans := &jobAnswer{}
	pid, err := b.consumers.Do(ctx, &worker.Call{Frame: frame, Answer: ans})
	if err != nil {
		var pe *pool.Error
		if errors.As(err, &pe) && pe.RetryAfter {
			// No consumer took it (none can boot, the queue is full, the pool stops): no
			// attempt, the job goes back.
			return fmt.Errorf("%w: %w", jobs.ErrNotBegun, err)
		}
		if errors.As(err, &pe) {
			return fmt.Errorf("consumer %d: status %d: %w", pid, pe.Status, err)
		}
		return fmt.Errorf("consumer %d: %w", pid, err)
	}
	if ans.status < 200 || ans.status > 299 {
		msg := strings.TrimSpace(string(ans.body))
		switch {
		case msg == "" && ans.fatal != "":
			msg = ans.fatal
		case msg == "" && ans.status == 500: // a fatal error the consumer could not name
			msg = "a fatal error, whose message the consumer printed on its STDERR (in the server's log, under its pid)"
		case msg == "":
			msg = "no message"
		}
		err := fmt.Errorf("consumer %d answered %d: %s", pid, ans.status, msg)
		if s, perr := strconv.ParseFloat(ans.retryAfter, 64); perr == nil && s >= 0 && s < 1e9 {
			return &jobs.RetryAfter{Delay: time.Duration(s * float64(time.Second)), Err: err}
		}
		return err
	}
	if !ans.done {
		msg := strings.TrimSpace(string(ans.body))
		if msg == "" {
			msg = "no output"
		}
		return fmt.Errorf("consumer %d ended the job without returning from it (exit() or die()), answering %d: %s", pid, ans.status, msg)
	}
	return nil
}

// stopConsumers stops the consume loops and lets the jobs running finish within ctx; then it
// kills their consumers, and those jobs are retried.
func (b *background) stopConsumers(ctx context.Context) {
	if b == nil || b.consumers == nil {
		return
	}
	b.stop()
	done := make(chan struct{})
	go func() { b.loops.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	b.consumers.Stop(ctx)
	<-done
}

// close stops the consumers at once if they still run, and closes the socket, the drivers and
// the stores. It may be called more than once.
func (b *background) close() {
	if b == nil {
		return
	}
	b.closeOnce.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		b.stopConsumers(ctx)
		if b.calls != nil {
			_ = b.calls.Close()
		}
		if err := b.set.Close(); err != nil {
			b.log.Warn("closing the job pipelines", "err", err)
		}
		for _, s := range b.stores {
			_ = s.Close()
		}
	})
}

// adminJobs is what the admin listener shows and drives: nil without pipelines.
func (b *background) adminJobs() admin.Jobs {
	if b == nil || len(b.set.Names()) == 0 {
		return nil
	}
	return b.set
}

// reset replaces every consumer, one at a time, as Pool.Reset does for the workers (SIGHUP,
// workers.watch), so that consumers run the new code too.
func (b *background) reset(ctx context.Context) error {
	if b == nil || b.consumers == nil {
		return nil
	}
	return b.consumers.Reset(ctx)
}

// adminPool is the workers' pool as the admin listener sees it: its Reset (POST /reset,
// peregrine reset) replaces the consumers too, as SIGHUP does.
type adminPool struct {
	admin.Pool
	bg *background
}

// Reset implements admin.Pool.
func (a adminPool) Reset(ctx context.Context) error {
	if err := a.Pool.Reset(ctx); err != nil {
		return err
	}
	return a.bg.reset(ctx)
}

// adminPool returns p, wrapped so that a reset through the admin listener replaces the
// consumers too.
func (b *background) adminPool(p admin.Pool) admin.Pool {
	if b == nil {
		return p
	}
	return adminPool{Pool: p, bg: b}
}
