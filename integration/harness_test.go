// Package integration holds the end-to-end tests: each one starts the real peregrine binary with
// real PHP workers from testdata/workers and talks real HTTP to it. They share this harness,
// which builds the binary once (with the race detector), starts servers on free ports, and
// checks after every test that no PHP process outlived its server.
package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var binary string // path of the peregrine binary under test

// buildFlags are the go build flags of the binary under test: the race detector, except in the
// stress suite (stress_test.go), which measures the binary users run.
var buildFlags = []string{"-race"}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "peregrine-it-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "peregrine")
	build := exec.Command("go", append(append([]string{"build"}, buildFlags...), "-o", binary, "../cmd/peregrine")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building peregrine:", err)
		os.Exit(1)
	}
	// The native runtime, beside the binary where the daemon looks for it first.
	native := exec.Command("make", "-s", "native")
	native.Dir = ".."
	native.Stdout, native.Stderr = os.Stderr, os.Stderr
	if err := native.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building bin/peregrine-php:", err)
		os.Exit(1)
	}
	nativeBin, _ := filepath.Abs(filepath.Join("..", "bin", "peregrine-php"))
	if err := os.Symlink(nativeBin, filepath.Join(dir, "peregrine-php")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// fixture returns the absolute path of a worker script in testdata/workers.
func fixture(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "testdata", "workers", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// server is one running peregrine process.
type server struct {
	t    *testing.T
	cmd  *exec.Cmd
	URL  string
	tag  string // set in every worker's environment, to find leaked processes
	dir  string
	log  *logBuffer
	done chan struct{} // closed when the process has exited
	err  error         // its exit error, valid after done
}

// logBuffer collects the server's stderr and lets tests wait for a line.
type logBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	wake chan struct{}
}

func (l *logBuffer) write(line string) {
	l.mu.Lock()
	l.buf.WriteString(line)
	l.buf.WriteByte('\n')
	close(l.wake)
	l.wake = make(chan struct{})
	l.mu.Unlock()
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// waitFor waits until the log matches re, failing the test after timeout.
func (l *logBuffer) waitFor(t *testing.T, re string, timeout time.Duration) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.After(timeout)
	for {
		l.mu.Lock()
		m := rx.FindString(l.buf.String())
		wake := l.wake
		l.mu.Unlock()
		if m != "" {
			return m
		}
		select {
		case <-wake:
		case <-deadline:
			t.Fatalf("log never matched %q; log:\n%s", re, l.String())
		}
	}
}

// count returns how many times re matches the log.
func (l *logBuffer) count(re string) int {
	return len(regexp.MustCompile(re).FindAllStringIndex(l.String(), -1))
}

// startServer starts peregrine with the given YAML config (without http.address and
// workers.env, which the harness sets) and waits until it listens.
func startServer(t *testing.T, yaml string) *server {
	t.Helper()
	s := launch(t, yaml)
	select {
	case <-s.done:
		t.Fatalf("peregrine exited at start (%v); log:\n%s", s.err, s.log.String())
	default:
	}
	return s
}

// launch starts peregrine and waits for its banner or its exit.
func launch(t *testing.T, yaml string, extraArgs ...string) *server {
	t.Helper()
	s := &server{t: t, dir: t.TempDir(), log: &logBuffer{wake: make(chan struct{})}, done: make(chan struct{})}
	s.tag = randomTag()
	// Tests run the PHP library on plain php (the cli runtime) unless they name a runtime: most
	// were written for it and crash workers with exit(), which the native runtime turns into the
	// end of a request, as PHP-FPM does. native_test.go runs the native runtime.
	if !strings.Contains(yaml, "runtime:") && strings.Contains(yaml, "workers:\n") {
		yaml = strings.Replace(yaml, "workers:\n", "workers:\n  runtime: cli\n", 1)
	}
	full := "http:\n  address: 127.0.0.1:0\n" + yaml
	if strings.Contains(yaml, "http:\n") {
		full = strings.Replace(yaml, "http:\n", "http:\n  address: 127.0.0.1:0\n", 1)
	}
	cfgPath := filepath.Join(s.dir, "peregrine.yaml")
	if err := os.WriteFile(cfgPath, []byte(full), 0o644); err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(binary, append([]string{"serve", "-c", cfgPath}, extraArgs...)...)
	s.cmd.Dir = s.dir
	s.cmd.Env = append(os.Environ(), "PEREGRINE_TEST_TAG="+s.tag) // inherited by the workers
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stdout = io.Discard
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	banner := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if m := bannerRE.FindStringSubmatch(line); m != nil {
				select {
				case banner <- m[1]:
				default:
				}
			}
			s.log.write(line)
		}
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() { s.stop(t) })
	select {
	case url := <-banner:
		s.URL = url
	case <-s.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("peregrine did not start within 60s; log:\n%s", s.log.String())
	}
	return s
}

var bannerRE = regexp.MustCompile(`serving (https?://\S+) with \d+ workers`)

func randomTag() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// signal sends sig to the server process.
func (s *server) signal(sig syscall.Signal) {
	s.t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("signal %v: %v", sig, err)
	}
}

// wait waits for the server to exit and returns its exit code.
func (s *server) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(timeout):
		t.Fatalf("peregrine still running after %s; log:\n%s", timeout, s.log.String())
	}
	return s.cmd.ProcessState.ExitCode()
}

// stop ends the server (SIGTERM, then SIGKILL) and checks that no worker outlived it.
func (s *server) stop(t *testing.T) {
	select {
	case <-s.done:
	default:
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
			t.Errorf("peregrine did not stop within 30s of SIGTERM; log:\n%s", s.log.String())
		}
	}
	// Workers die with their server (Pdeathsig); give the kernel a moment to reap them.
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := processesTagged(s.tag)
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("PHP processes outlived their server: %v", pids)
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if t.Failed() {
		t.Logf("server log:\n%s", s.log.String())
	}
}

// processesTagged lists live processes whose environment carries tag.
func processesTagged(tag string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	needle := []byte("PEREGRINE_TEST_TAG=" + tag)
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, needle) {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil && bytes.Contains(stat, []byte(") Z ")) {
			continue // a zombie is dead; its parent reaps it
		}
		pids = append(pids, pid)
	}
	return pids
}

var client = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// response is a read HTTP response.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// do sends a request and reads the whole response.
func do(t *testing.T, method, url string, body io.Reader, headers ...string) response {
	t.Helper()
	r, err := doErr(context.Background(), method, url, body, headers...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return r
}

func doErr(ctx context.Context, method, url string, body io.Reader, headers ...string) (response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return response{}, err
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

func get(t *testing.T, url string) response {
	t.Helper()
	return do(t, http.MethodGet, url, nil)
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
