package daemon

import (
	"bytes"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/peregrinephp/peregrine/internal/config"
	"github.com/peregrinephp/peregrine/internal/pool"
	"github.com/peregrinephp/peregrine/internal/worker"
)

// recordingPool stands for the pool's SetOptions, which internal/pool does not have yet.
type recordingPool struct {
	got []pool.Options
	err error
}

func (p *recordingPool) SetOptions(o pool.Options) error {
	p.got = append(p.got, o)
	return p.err
}

func newTestReloader(t *testing.T, running *config.Config, p any) (*reloader, *bytes.Buffer, *slog.LevelVar) {
	t.Helper()
	var buf bytes.Buffer
	level := new(slog.LevelVar)
	r := &reloader{
		log: slog.New(slog.NewTextHandler(&buf, nil)), level: level, pool: p, running: running, shape: shapeOf(running.Workers),
		workerOptions: func(c config.Config) (worker.Options, error) {
			return worker.Options{Argv: c.Workers.Command, Dir: c.Workers.Dir, Env: workerEnv(c)}, nil
		},
		poolOptions: func(c config.Config, wo worker.Options) pool.Options {
			return poolOptions(c, c.Workers.ResolvedCount(), wo, nil, nil)
		},
	}
	return r, &buf, level
}

func testConfig(t *testing.T) config.Config {
	c := config.Default()
	c.Workers.Command = []string{"php", "a.php"}
	c.Workers.Dir = t.TempDir()
	return c
}

func TestReloadAppliesWorkerSettingsAndLevel(t *testing.T) {
	running := testConfig(t)
	p := &recordingPool{}
	r, log, level := newTestReloader(t, &running, p)
	next := running
	next.Workers.Command = []string{"php", "b.php"}
	next.Workers.MaxJobs = 7
	next.Log.Level = "warn"
	if !r.apply(next, nil) {
		t.Fatalf("nothing applied; log:\n%s", log)
	}
	if len(p.got) != 1 || p.got[0].MaxJobs != 7 || p.got[0].Worker.Argv[1] != "b.php" || p.got[0].Size != running.Workers.ResolvedCount() {
		t.Fatalf("the pool got %+v", p.got)
	}
	if level.Level() != slog.LevelWarn || running.Log.Level != "warn" || running.Workers.MaxJobs != 7 {
		t.Fatalf("level %v, running %+v", level.Level(), running)
	}
	if strings.Contains(log.String(), "need a restart") {
		t.Errorf("a reload of worker settings asked for a restart:\n%s", log)
	}
}

func TestReloadKeepsTheRunningConfigOnError(t *testing.T) {
	running := testConfig(t)
	p := &recordingPool{}
	r, log, _ := newTestReloader(t, &running, p)
	before := running
	if r.apply(config.Config{}, errors.New("peregrine.yaml:3: workers.cuont: unknown key")) {
		t.Fatal("an invalid file was applied")
	}
	if !strings.Contains(log.String(), "the running config stays") || !strings.Contains(log.String(), "cuont") {
		t.Errorf("log:\n%s", log)
	}
	next := running
	next.Workers.Dir = "/does/not/exist"
	if r.apply(next, nil) || len(p.got) != 0 {
		t.Fatalf("a missing workers.dir was applied: %+v", p.got)
	}
	p.err = errors.New("size differs")
	next = running
	next.Workers.MaxJobs = 9
	if r.apply(next, nil) {
		t.Fatal("applied although the pool refused")
	}
	if running.Workers.MaxJobs != before.Workers.MaxJobs || running.Workers.Dir != before.Workers.Dir {
		t.Fatalf("the running config changed: %+v", running.Workers)
	}
}

func TestReloadNamesWhatNeedsARestart(t *testing.T) {
	running := testConfig(t)
	r, log, _ := newTestReloader(t, &running, struct{}{}) // a pool without SetOptions
	next := running
	next.HTTP.Address = "127.0.0.1:9999"
	next.Workers.Runtime = "cli"
	next.Workers.MaxJobs = 5
	next.Workers.StopTimeout = running.Workers.StopTimeout * 2
	r.apply(next, nil)
	for _, want := range []string{"http", "workers.runtime", "this build's pool", "applied=[workers.stop_timeout]"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the log does not say %q:\n%s", want, log)
		}
	}
	if running.HTTP.Address == next.HTTP.Address || running.Workers.MaxJobs == 5 || running.Workers.StopTimeout != next.Workers.StopTimeout {
		t.Errorf("running %+v", running)
	}
}

// TestReloadOfANewShapeWaitsForTheReset: workers.count or workers.concurrency, with the rest of
// the same edit (env), is not handed to the running pool, which cannot take it, but kept for
// the reset to start a new pool on; an edit back to the running shape goes to the pool again.
func TestReloadOfANewShapeWaitsForTheReset(t *testing.T) {
	running := testConfig(t)
	running.Workers.Count = 2
	p := &recordingPool{}
	r, log, _ := newTestReloader(t, &running, p)
	for _, change := range []func(*config.Config){
		func(c *config.Config) { c.Workers.Count = 3 },
		func(c *config.Config) { c.Workers.Concurrency = 8 },
	} {
		next := running
		next.Workers.Env = map[string]string{"TAG": "b"}
		change(&next)
		if !r.apply(next, nil) {
			t.Fatalf("nothing applied; log:\n%s", log)
		}
		if len(p.got) != 0 || r.pending == nil {
			t.Fatalf("SetOptions got %+v, pending %v: want nothing to the pool, a new pool pending", p.got, r.pending)
		}
		if r.pending.Size != next.Workers.ResolvedCount() || max(r.pending.Concurrency, 1) != max(next.Workers.Concurrency, 1) ||
			!slices.Contains(r.pending.Worker.Env, "TAG=b") {
			t.Errorf("the pending pool: size %d, concurrency %d, env %v", r.pending.Size, r.pending.Concurrency, r.pending.Worker.Env)
		}
		if strings.Contains(log.String(), "need a restart") {
			t.Errorf("a new shape asked for a restart:\n%s", log)
		}
		// Back to the running pool's shape: the pool takes the settings, nothing is pending.
		back := next
		back.Workers.Count, back.Workers.Concurrency = 2, 0
		r.apply(back, nil)
		if len(p.got) != 1 || r.pending != nil {
			t.Fatalf("back to the running shape: SetOptions got %d, pending %v", len(p.got), r.pending)
		}
		p.got = nil
	}
}
