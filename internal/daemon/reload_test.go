package daemon

import (
	"bytes"
	"errors"
	"log/slog"
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
		log: slog.New(slog.NewTextHandler(&buf, nil)), level: level, pool: p, running: running,
		workerOptions: func(c config.Config) (worker.Options, error) {
			return worker.Options{Argv: c.Workers.Command, Dir: c.Workers.Dir}, nil
		},
		poolOptions: func(c config.Config, wo worker.Options) pool.Options {
			return poolOptions(c, 2, wo, nil, nil)
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
	if len(p.got) != 1 || p.got[0].MaxJobs != 7 || p.got[0].Worker.Argv[1] != "b.php" || p.got[0].Size != 2 {
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
	next.Workers.Count = running.Workers.ResolvedCount() + 1
	next.Workers.MaxJobs = 5
	next.Workers.StopTimeout = running.Workers.StopTimeout * 2
	r.apply(next, nil)
	for _, want := range []string{"http", "workers.count", "this build's pool", "applied=[workers.stop_timeout]"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the log does not say %q:\n%s", want, log)
		}
	}
	if running.HTTP.Address == next.HTTP.Address || running.Workers.MaxJobs == 5 || running.Workers.StopTimeout != next.Workers.StopTimeout {
		t.Errorf("running %+v", running)
	}
}
