package daemon

import (
	"context"
	"encoding/binary"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/peregrinephp/peregrine/internal/config"
	"github.com/peregrinephp/peregrine/internal/pool"
)

// fakePool is an admin.Pool of fixed workers.
type fakePool struct{ infos []pool.WorkerInfo }

func (f fakePool) Workers() []pool.WorkerInfo      { return append([]pool.WorkerInfo(nil), f.infos...) }
func (f fakePool) Ready() int                      { return 0 }
func (f fakePool) Waiting() int                    { return 0 }
func (f fakePool) Reset(ctx context.Context) error { return nil }

// writeRow writes a worker's row as native/direct.c lays it out.
func writeRow(t *testing.T, s *directStats, i int, pid uint32, requests uint64, busySince time.Time) {
	t.Helper()
	b := make([]byte, directRowSize)
	binary.LittleEndian.PutUint32(b, pid)
	binary.LittleEndian.PutUint64(b[8:], requests)
	binary.LittleEndian.PutUint64(b[16:], 100)    // bytes in
	binary.LittleEndian.PutUint64(b[24:], 200)    // bytes out
	binary.LittleEndian.PutUint64(b[32+8*1:], 7)  // 2xx
	binary.LittleEndian.PutUint64(b[72+8*11:], 1) // one request of 5 s or more
	if !busySince.IsZero() {
		binary.LittleEndian.PutUint64(b[168:], uint64(busySince.UnixNano()))
	}
	binary.LittleEndian.PutUint64(b[176:], 2) // the process before had answered 2 of them
	f, err := os.OpenFile(s.path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, int64(i*directRowSize)); err != nil {
		t.Fatal(err)
	}
}

// TestDirectStats: the rows the workers write are read back whole, `peregrine workers` shows
// each worker's own count and whether it runs a request, and the backstop kills only a current
// worker whose request outlived exec_timeout.
func TestDirectStats(t *testing.T) {
	s, err := newDirectStats(t.TempDir(), 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	overdue := exec.Command("sleep", "60") // a worker whose request runs on
	if err := overdue.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { overdue.Process.Kill(); overdue.Wait() })
	idle, gone := 1<<22+1, 1<<22+2 // pids no process has
	now := time.Now()
	writeRow(t, s, 0, uint32(overdue.Process.Pid), 5, now.Add(-time.Minute))
	writeRow(t, s, 1, uint32(idle), 9, time.Time{})
	writeRow(t, s, 3, uint32(gone), 1, now.Add(-time.Hour)) // not a current worker

	rows := s.rows()
	if len(rows) != 3 || rows[0].Requests != 5 || rows[0].BytesIn != 100 || rows[0].BytesOut != 200 ||
		rows[0].Status[1] != 7 || rows[0].Latency[11] != 1 || !rows[1].BusySince.IsZero() ||
		rows[0].BusySince.UnixNano() != now.Add(-time.Minute).UnixNano() {
		t.Fatalf("rows %+v", rows)
	}
	p := fakePool{infos: []pool.WorkerInfo{
		{Slot: 1, PID: overdue.Process.Pid, State: pool.StateReady},
		{Slot: 2, PID: idle, State: pool.StateReady},
		{Slot: 3, State: pool.StateStarting},
	}}
	infos := directAdminPool{Pool: p, stats: s}.Workers()
	if infos[0].Requests != 3 || infos[0].State != pool.StateBusy || infos[0].BusySince.IsZero() ||
		infos[1].Requests != 7 || infos[1].State != pool.StateReady || infos[2].Requests != 0 {
		t.Errorf("workers %+v, want each process's own count", infos)
	}
	// /metrics sums every row, whoever has it now.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(newDirectCollector(s))
	want := `
# HELP peregrine_direct_requests_total Requests the workers answered themselves in direct mode (http.direct).
# TYPE peregrine_direct_requests_total counter
peregrine_direct_requests_total 15
# HELP peregrine_direct_sent_bytes_total Bytes the workers wrote to their connections in direct mode.
# TYPE peregrine_direct_sent_bytes_total counter
peregrine_direct_sent_bytes_total 600
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "peregrine_direct_requests_total", "peregrine_direct_sent_bytes_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(newDirectCollector(s)); n != 9 {
		t.Errorf("%d metrics, want requests, 5 status classes, bytes in and out, duration", n)
	}
	log := slog.New(slog.DiscardHandler)
	if killed := s.killOverdue(p, 2*time.Minute, now, log); len(killed) != 0 {
		t.Errorf("killed %v within the limit", killed)
	}
	if killed := s.killOverdue(p, 30*time.Second, now, log); len(killed) != 1 || killed[0] != overdue.Process.Pid {
		t.Fatalf("killed %v, want only the overdue worker %d", killed, overdue.Process.Pid)
	}
	if err := overdue.Wait(); err == nil {
		t.Error("the overdue worker was not killed")
	}
}

// TestDirectDrainBackstop: an old worker draining after a reset stays listed as draining (its
// running request does not make it "busy"), and the backstop kills it only once its counters
// have not moved for the stall limit: a drain that reads or writes goes on however long.
func TestDirectDrainBackstop(t *testing.T) {
	s, err := newDirectStats(t.TempDir(), 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	start := func() *exec.Cmd {
		c := exec.Command("sleep", "60")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		return c
	}
	hung, moving, current := start(), start(), start()
	now := time.Now()
	writeRow(t, s, 0, uint32(hung.Process.Pid), 5, now.Add(-time.Second))
	writeRow(t, s, 1, uint32(moving.Process.Pid), 5, time.Time{})
	writeRow(t, s, 2, uint32(current.Process.Pid), 5, time.Time{})
	p := fakePool{infos: []pool.WorkerInfo{
		{Slot: 1, PID: current.Process.Pid, State: pool.StateReady},
		{Slot: 1, PID: hung.Process.Pid, State: pool.StateDraining},
		{Slot: 1, PID: moving.Process.Pid, State: pool.StateDraining},
	}}
	if infos := (directAdminPool{Pool: p, stats: s}).Workers(); infos[1].State != pool.StateDraining || infos[1].Requests != 3 {
		t.Errorf("a draining worker running a request: %+v, want draining with its own count", infos[1])
	}
	log := slog.New(slog.DiscardHandler)
	seen := map[int]progress{}
	stall := 10 * time.Second
	for i, step := range []time.Duration{0, 5 * time.Second, 10 * time.Second} {
		writeRow(t, s, 1, uint32(moving.Process.Pid), uint64(6+i), time.Time{}) // a request ended
		if killed := s.killStalled(p, stall, now.Add(step), seen, log); len(killed) != 0 {
			t.Fatalf("killed %v %v after the drain began, within the limit or moving", killed, step)
		}
	}
	killed := s.killStalled(p, stall, now.Add(12*time.Second), seen, log)
	if len(killed) != 1 || killed[0] != hung.Process.Pid {
		t.Fatalf("killed %v, want only the draining worker quiet for %v: %d", killed, stall, hung.Process.Pid)
	}
	if err := hung.Wait(); err == nil {
		t.Error("the hung worker was not killed")
	}
	p.infos = p.infos[:1] // the drains are over
	s.killStalled(p, stall, now.Add(13*time.Second), seen, log)
	if len(seen) != 0 {
		t.Errorf("progress kept for workers no longer draining: %v", seen)
	}
}

// TestDirectLimitsFollowReloads: the backstop's limits are the config a reload applied, not the
// one at start: a reload that raises workers.exec_timeout must not get requests within it killed.
func TestDirectLimitsFollowReloads(t *testing.T) {
	running := testConfig(t)
	running.HTTP.Direct = true
	running.Workers.ExecTimeout = config.Duration(30 * time.Second)
	r, log, _ := newTestReloader(t, &running, &recordingPool{})
	limits := directLimits(r)
	if exec, stall := limits(); exec != 35*time.Second || stall != drainStall(running) {
		t.Fatalf("limits at start: %v, %v", exec, stall)
	}
	next := running
	next.Workers.ExecTimeout = config.Duration(2 * time.Minute)
	if !r.apply(next, nil) {
		t.Fatalf("nothing applied; log:\n%s", log)
	}
	if exec, stall := limits(); exec != 2*time.Minute+directGrace || stall != 2*time.Minute+directGrace {
		t.Errorf("limits after a reload to exec_timeout 2m: %v, %v", exec, stall)
	}
}

// TestDirectEnv: the limits the front enforces reach the workers; http.max_connections is
// shared out among them, rounded up, and left to each worker's default when 0.
func TestDirectEnv(t *testing.T) {
	for _, tt := range []struct {
		name         string
		conns, count int
		want, absent string
	}{
		{"shared", 10, 4, ",max_conns=3", ""},
		{"fewer than workers", 2, 4, ",max_conns=1", ""},
		{"default", 0, 4, "", "max_conns="},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.HTTP.MaxConnections, cfg.Workers.Count = tt.conns, tt.count
			cfg.HTTP.MaxCookies, cfg.HTTP.MaxInputVars = 7, 9
			env := directEnv(cfg)
			for _, w := range []string{",max_cookies=7", ",max_input_vars=9", tt.want} {
				if !strings.Contains(env, w) {
					t.Errorf("%s lacks %q", env, w)
				}
			}
			if tt.absent != "" && strings.Contains(env, tt.absent) {
				t.Errorf("%s has %q", env, tt.absent)
			}
		})
	}
}

// TestDirectSocketStaysNonBlocking: every worker start hands the listening socket to a child
// (os/exec calls the file's Fd). One socket shared by all the workers must stay non-blocking
// through that: a worker whose accept lost the race for a connection would otherwise block in
// accept4 with its kept-alive clients unanswered and its STOP unread, so a reset never ended.
func TestDirectSocketStaysNonBlocking(t *testing.T) {
	front, err := listenDirect("127.0.0.1:0", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = front.close() })
	for range 2 { // a worker's start, then its replacement's
		cmd := exec.Command("true")
		cmd.ExtraFiles = []*os.File{front.file}
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
	}
	rc, err := front.ln.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var flags int
	var ferr error
	if err := rc.Control(func(fd uintptr) { flags, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err != nil || ferr != nil {
		t.Fatal(err, ferr)
	}
	if flags&unix.O_NONBLOCK == 0 {
		t.Errorf("the listening socket is blocking after the workers' starts (flags %#o)", flags)
	}
}
