package integration

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// workers.fork's default (issue 16): the workers are forked from a template when the native
// runtime runs them, unless fork: false asks for every worker to be executed.

// TestForkByDefault: peregrine serve with the defaults (no runtime, no fork key) forks its
// workers, in worker mode (the script on the command line) and in classic mode; config check
// prints the effective value.
func TestForkByDefault(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"worker", "classic"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dir := forkApp(t)
			// No workers section: launch would name the cli runtime in one.
			yaml, args := "http:\n  root: "+dir+"\n", []string{"--workers", "2"}
			if mode == "worker" {
				yaml, args = "", append(args, filepath.Join(dir, "worker.php"))
			}
			s := launch(t, yaml, args...)
			select {
			case <-s.done:
				t.Fatalf("peregrine exited at start (%v); log:\n%s", s.err, s.log.String())
			default:
			}
			a, b := bothWorkers(t, s)
			checkForked(t, s, a, b)
			if pids := processesTagged(s.tag); len(pids) != 4 {
				t.Errorf("processes %v carry the tag, want 4 (server, template and 2 workers)", pids)
			}
			file := filepath.Join(s.dir, "peregrine.yaml")
			if mode == "worker" { // config check needs the command in the file
				file = filepath.Join(t.TempDir(), "peregrine.yaml")
				if err := os.WriteFile(file, []byte("workers:\n  command: php "+filepath.Join(dir, "worker.php")+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			out, code := runCLI(t, s.dir, nil, "config", "check", "-c", file)
			if want := "\n  fork: true\n"; code != 0 || !strings.Contains(out, want) {
				t.Errorf("config check: exit %d, want %q in:\n%s", code, want, out)
			}
		})
	}
}

// TestForkByDefaultWithoutFile: peregrine serve worker.php with no configuration file at all
// (config.Default) forks its workers too: the template starts before the banner, and the
// server, the template and both workers are alive.
func TestForkByDefaultWithoutFile(t *testing.T) {
	t.Parallel()
	dir := forkApp(t)
	tag := randomTag()
	cmd := exec.Command(binary, "serve", filepath.Join(dir, "worker.php"), "--workers", "2", "--address", "127.0.0.1:0")
	cmd.Dir = t.TempDir() // no peregrine.yaml there
	cmd.Env = append(os.Environ(), "PEREGRINE_TEST_TAG="+tag)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	var lines []string
	for sc.Scan() && !strings.Contains(sc.Text(), " serving http://") {
		lines = append(lines, sc.Text())
	}
	if !strings.Contains(strings.Join(lines, "\n"), `"msg":"worker template started"`) {
		t.Fatalf("no template started before the banner:\n%s", strings.Join(lines, "\n"))
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	eventually(t, 10*time.Second, "the server, the template and 2 workers", func() bool { return len(processesTagged(tag)) == 4 })
}

// TestForkFalseExecutes: fork: false under the native runtime executes every worker: no
// template starts, and the workers are the server's only processes.
func TestForkFalseExecutes(t *testing.T) {
	t.Parallel()
	dir := forkApp(t)
	s := startServer(t, "workers:\n  runtime: native\n  fork: false\n  count: 2\n  command: php "+filepath.Join(dir, "worker.php")+"\n")
	a, b := bothWorkers(t, s)
	for _, pid := range []int{a.PID, b.PID} {
		if parent(pid) != s.cmd.Process.Pid {
			t.Errorf("worker %d: parent %d, want the server %d", pid, parent(pid), s.cmd.Process.Pid)
		}
	}
	if n := s.log.count(`"msg":"worker template started"`); n != 0 {
		t.Errorf("%d templates started with fork: false", n)
	}
	if pids := processesTagged(s.tag); len(pids) != 3 {
		t.Errorf("processes %v carry the tag, want 3 (server and 2 workers)", pids)
	}
	s.signal(syscall.SIGTERM)
	if code := s.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit code %d", code)
	}
}
