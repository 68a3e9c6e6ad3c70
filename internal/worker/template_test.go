package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nativeTemplate starts a template of bin/peregrine-php (make native) for script (a path, or a
// name in testdata/workers), closed when the test ends.
func nativeTemplate(t *testing.T, script string) (*Template, Options) {
	t.Helper()
	native, _ := filepath.Abs(filepath.Join("..", "..", "bin", NativeProgram))
	if _, err := os.Stat(native); err != nil {
		t.Skipf("the native runtime is not built (make native): %v", err)
	}
	path := script
	if !filepath.IsAbs(path) {
		path, _ = filepath.Abs(filepath.Join("..", "..", "testdata", "workers", script))
	}
	opts := Options{Argv: []string{native, path}, Env: append(os.Environ(), "PEREGRINE_PROTOCOL=3"), BootTimeout: 30 * time.Second}
	tmpl, err := StartTemplate(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pid := tmpl.PID()
		tmpl.Close()
		if alive(pid) {
			t.Errorf("template %d still runs after Close", pid)
		}
	})
	opts.Template = tmpl
	return tmpl, opts
}

// started starts a worker with opts (forked from opts.Template when it is set) and stops it
// when the test ends.
func started(t *testing.T, opts Options) *Worker {
	t.Helper()
	w, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		w.Stop(ctx)
	})
	return w
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !bytes.Contains(stat, []byte(") Z "))
}

func parentOf(t *testing.T, pid int) int {
	t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	var ppid int
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if _, err := fmt.Sscan(fields[1], &ppid); err != nil {
		t.Fatal(err)
	}
	return ppid
}

// pidOf asks the worker for its pid.
func pidOf(t *testing.T, w *Worker) string {
	t.Helper()
	cs, as := calls(t, "/pid")
	if _, err := seq(w).Exec(context.Background(), cs, 30*time.Second, -1, nil); err != nil || as[0].status != 200 {
		t.Fatalf("/pid: %v, %+v", err, as[0])
	}
	return string(as[0].body)
}

func TestTemplateForks(t *testing.T) {
	tmpl, opts := nativeTemplate(t, "app.php")
	a, b := started(t, opts), started(t, opts)
	if a.PID() == b.PID() || a.PID() == tmpl.PID() {
		t.Fatalf("pids: %d, %d, template %d", a.PID(), b.PID(), tmpl.PID())
	}
	for _, w := range []*Worker{a, b} {
		if got := pidOf(t, w); got != fmt.Sprint(w.PID()) {
			t.Errorf("worker %d answers as pid %s", w.PID(), got)
		}
		if ppid := parentOf(t, w.PID()); ppid != os.Getpid() {
			t.Errorf("worker %d: parent %d, want this process (%d)", w.PID(), ppid, os.Getpid())
		}
		if pgid, _ := syscall.Getpgid(w.PID()); pgid != w.PID() {
			t.Errorf("worker %d: process group %d, want its own", w.PID(), pgid)
		}
	}
	// A crash is seen and described as an executed worker's: after a fatal error the native
	// runtime answers 500, says it exits (DONE with LAST) and exits with 255.
	cs, as := calls(t, "/fatal")
	if _, err := seq(a).Exec(context.Background(), cs, 30*time.Second, -1, nil); !errors.Is(err, ErrExiting) || as[0].status != 500 {
		t.Fatalf("/fatal: %v, %+v", err, as[0])
	}
	<-a.Exited()
	if err := a.ExitError(); !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "exit code 255") || a.KilledBySIGKILL() {
		t.Fatalf("after /fatal: %v", err)
	}
	if err := syscall.Kill(b.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-b.Exited()
	if !b.KilledBySIGKILL() {
		t.Errorf("a forked worker killed with SIGKILL: %v", b.ExitError())
	}
}

func TestTemplateRestartsAfterDeath(t *testing.T) {
	tmpl, opts := nativeTemplate(t, "app.php")
	first := tmpl.PID()
	before := started(t, opts)
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	w := started(t, opts) // Fork sees the template gone and starts a new one
	if tmpl.PID() == first || tmpl.PID() == 0 {
		t.Fatalf("template pid %d after the death of %d", tmpl.PID(), first)
	}
	if alive(first) {
		t.Errorf("the dead template %d was not reaped", first)
	}
	pidOf(t, w)
	pidOf(t, before) // a worker outlives its template
}

func TestTemplateRenew(t *testing.T) {
	tmpl, opts := nativeTemplate(t, "app.php")
	first := tmpl.PID()
	before := started(t, opts)
	if err := tmpl.Renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	if tmpl.PID() == first || alive(first) {
		t.Fatalf("template %d after Renew; the old one %d alive: %v", tmpl.PID(), first, alive(first))
	}
	pidOf(t, started(t, opts))
	pidOf(t, before)
	tmpl.Close()
	if _, err := Start(context.Background(), opts); !errors.Is(err, ErrBoot) || !errors.Is(err, ErrTemplateClosed) {
		t.Fatalf("Start after Close: %v", err)
	}
}

func TestTemplateBootErrorCarriesPHPOutput(t *testing.T) {
	script := filepath.Join(t.TempDir(), "boot-exit.php")
	if err := os.WriteFile(script, []byte("<?php\nerror_log('bootstrap failed: database unreachable');\nexit(1);\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, opts := nativeTemplate(t, script)
	_, err := Start(context.Background(), opts)
	if !errors.Is(err, ErrBoot) || !strings.Contains(err.Error(), "database unreachable") || !strings.Contains(err.Error(), "exit code 1") {
		t.Fatalf("err = %v", err)
	}
}

// TestTemplateForkInterrupted: a fork that ctx ends while the template does not answer (here
// stopped) fails with ctx's error and gives up that template; the next fork starts a new one.
func TestTemplateForkInterrupted(t *testing.T) {
	tmpl, opts := nativeTemplate(t, "app.php")
	first := tmpl.PID()
	if err := syscall.Kill(first, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := Start(ctx, opts); !errors.Is(err, ErrBoot) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start with a stopped template: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); alive(first); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the stopped template %d was not killed", first)
		}
	}
	pidOf(t, started(t, opts))
	if tmpl.PID() == first {
		t.Fatal("no new template")
	}
}
