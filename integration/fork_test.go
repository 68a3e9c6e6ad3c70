package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// workers.fork (issue 12): the workers are forked from one template process of the native
// runtime, share its OPcache, and are supervised as executed ones.

// forkApp writes a small application into a new directory: worker.php (worker mode) and
// index.php (classic mode) answer with their pid and whether unique.php is in OPcache, after
// sleeping ?ms= milliseconds and, with ?compile=1, running unique.php.
func forkApp(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"handler.php": `<?php
function fork_test_answer(): void {
    usleep((int) ($_GET['ms'] ?? 0) * 1000);
    if (isset($_GET['compile'])) {
        require_once __DIR__ . '/unique.php';
    }
    $scripts = opcache_get_status(true)['scripts'] ?? [];
    header('Content-Type: application/json');
    echo json_encode(['pid' => getmypid(), 'cached' => isset($scripts[__DIR__ . '/unique.php']),
        'preloaded' => function_exists('preloaded_answer')]);
}
`,
		"worker.php":  "<?php\nrequire __DIR__ . '/handler.php';\nwhile (peregrine_handle_request('fork_test_answer')) {\n}\n",
		"index.php":   "<?php\nrequire __DIR__ . '/handler.php';\nfork_test_answer();\n",
		"unique.php":  "<?php\n// Run by one worker only.\n$unique = true;\n",
		"exit.php":    "<?php\nerror_log('bootstrap failed: database unreachable');\nexit(1);\n",
		"preload.php": "<?php\nfunction preloaded_answer(): string\n{\n    return 'preloaded';\n}\n",
	}
	for name, src := range files {
		writeOld(t, filepath.Join(dir, name), src)
	}
	return dir
}

// writeOld writes a PHP file dated a minute ago: OPcache leaves out files changed in the last 2
// seconds (opcache.file_update_protection).
func writeOld(t *testing.T, path, src string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Minute)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
}

// forkServer starts 2 workers on the app in mode "worker" or "classic", forked or not.
func forkServer(t *testing.T, dir, mode string, fork bool) *server {
	t.Helper()
	workers := fmt.Sprintf("workers:\n  runtime: native\n  fork: %t\n  count: 2\n", fork)
	if mode == "classic" {
		return startServer(t, "http:\n  root: "+dir+"\n"+workers)
	}
	return startServer(t, workers+"  command: php "+filepath.Join(dir, "worker.php")+"\n")
}

type forkAnswer struct {
	PID       int  `json:"pid"`
	Cached    bool `json:"cached"`
	Preloaded bool `json:"preloaded"`
}

func ask(t *testing.T, url string) forkAnswer {
	t.Helper()
	r := get(t, url)
	var a forkAnswer
	if err := json.Unmarshal(r.Body, &a); err != nil || r.Status != 200 || a.PID == 0 {
		t.Fatalf("GET %s: %d %q (%v)", url, r.Status, r.Body, err)
	}
	return a
}

// bothWorkers sends pairs of overlapping requests until two workers have answered together, and
// returns what each said.
func bothWorkers(t *testing.T, s *server) (a, b forkAnswer) {
	t.Helper()
	eventually(t, 30*time.Second, "two workers answering at once", func() bool {
		var wg sync.WaitGroup
		var got [2]forkAnswer
		for i := range got {
			wg.Go(func() { got[i] = ask(t, s.URL+"/?ms=300") })
		}
		wg.Wait()
		a, b = got[0], got[1]
		return a.PID != b.PID
	})
	return a, b
}

// parent returns the parent pid of pid, 0 if it is gone.
func parent(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil || bytes.Contains(stat, []byte(") Z ")) {
		return 0
	}
	var state string
	var ppid int
	_, _ = fmt.Sscan(string(stat[bytes.LastIndexByte(stat, ')')+1:]), &state, &ppid)
	return ppid
}

var templatePID = regexp.MustCompile(`"msg":"worker template (?:started|renewed)"[^\n]*?"pid":(\d+)`)

// template returns the pid of the last template the server started, from its log.
func (s *server) template(t *testing.T) int {
	t.Helper()
	s.log.waitFor(t, templatePID.String(), 10*time.Second)
	m := templatePID.FindAllStringSubmatch(s.log.String(), -1)
	pid, _ := strconv.Atoi(m[len(m)-1][1])
	return pid
}

// checkForked checks that the answers came from two workers that are the server's children,
// forked from its template, which is alive and is neither of them.
func checkForked(t *testing.T, s *server, answers ...forkAnswer) {
	t.Helper()
	daemon, tmpl := s.cmd.Process.Pid, s.template(t)
	if parent(tmpl) != daemon {
		t.Errorf("template %d: parent %d, want the server %d", tmpl, parent(tmpl), daemon)
	}
	for _, a := range answers {
		if a.PID == tmpl {
			t.Errorf("the template %d answered a request", tmpl)
		}
		if parent(a.PID) != daemon {
			t.Errorf("worker %d: parent %d, want the server %d (CLONE_PARENT)", a.PID, parent(a.PID), daemon)
		}
	}
}

func TestForkServes(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"worker", "classic"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			s := forkServer(t, forkApp(t), mode, true)
			a, b := bothWorkers(t, s)
			checkForked(t, s, a, b)
			// The template and both workers carry the server's environment (the harness finds
			// them by it) and are gone once it has stopped.
			if pids := processesTagged(s.tag); len(pids) != 4 {
				t.Errorf("processes %v carry the tag, want 4 (server, template and 2 workers)", pids)
			}
			s.signal(syscall.SIGTERM)
			if code := s.wait(t, 30*time.Second); code != 0 {
				t.Fatalf("exit code %d", code)
			}
			eventually(t, 5*time.Second, "no process left", func() bool { return len(processesTagged(s.tag)) == 0 })
		})
	}
}

// TestForkSharesOPcache: a script one worker compiled is in the other's OPcache, which never
// ran it; without fork each worker has an OPcache of its own.
func TestForkSharesOPcache(t *testing.T) {
	t.Parallel()
	for _, fork := range []bool{true, false} {
		t.Run(fmt.Sprintf("fork=%t", fork), func(t *testing.T) {
			t.Parallel()
			s := forkServer(t, forkApp(t), "worker", fork)
			compiler := ask(t, s.URL+"/?compile=1")
			if !compiler.Cached {
				t.Fatalf("unique.php is not in the OPcache of the worker that ran it: %+v", compiler)
			}
			var other forkAnswer
			eventually(t, 30*time.Second, "the other worker's answer", func() bool {
				a, b := bothWorkers(t, s)
				other = a
				if a.PID == compiler.PID {
					other = b
				}
				return other.PID != compiler.PID
			})
			if other.Cached != fork {
				t.Errorf("worker %d, which never ran unique.php: in its OPcache %t, want %t (fork %t)", other.PID, other.Cached, fork, fork)
			}
		})
	}
}

// TestForkReplacesWorkers: a worker killed with SIGKILL is replaced by a fork; once the
// template itself has been killed, the next replacement starts a new template.
func TestForkReplacesWorkers(t *testing.T) {
	t.Parallel()
	s := forkServer(t, forkApp(t), "worker", true)
	a, b := bothWorkers(t, s)
	killAndWait := func(pid int) {
		t.Helper()
		started := s.log.count(`"msg":"worker started"`)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "the replacement", func() bool { return s.log.count(`"msg":"worker started"`) > started })
	}
	killAndWait(a.PID)
	c, d := bothWorkers(t, s)
	if pids := []int{c.PID, d.PID}; slices.Contains(pids, a.PID) || !slices.Contains(pids, b.PID) {
		t.Fatalf("after killing %d (of %d and %d): workers %v", a.PID, a.PID, b.PID, pids)
	}
	checkForked(t, s, c, d)

	first := s.template(t)
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the template's death", func() bool { return parent(first) == 0 })
	killAndWait(c.PID)
	s.log.waitFor(t, `the worker template is gone; starting a new one`, 10*time.Second)
	if second := s.template(t); second == first {
		t.Fatalf("template %d was not replaced", first)
	}
	e, f := bothWorkers(t, s)
	if slices.Contains([]int{e.PID, f.PID}, c.PID) {
		t.Fatalf("worker %d still answers", c.PID)
	}
	checkForked(t, s, e, f)
}

// TestForkReset: SIGHUP starts a new template before it replaces the workers, so the new
// workers have a new OPcache (new code) and the old template is gone.
func TestForkReset(t *testing.T) {
	t.Parallel()
	s := forkServer(t, forkApp(t), "worker", true)
	first := s.template(t)
	old := ask(t, s.URL+"/?compile=1")
	s.signal(syscall.SIGHUP)
	s.log.waitFor(t, `all workers replaced`, 30*time.Second)
	second := s.template(t)
	if second == first {
		t.Fatalf("template %d not renewed by the reset", first)
	}
	eventually(t, 10*time.Second, "the old template's exit", func() bool { return parent(first) == 0 })
	a, b := bothWorkers(t, s)
	if a.PID == old.PID || b.PID == old.PID || a.Cached || b.Cached {
		t.Errorf("after the reset: %+v and %+v (before: %+v)", a, b, old)
	}
	checkForked(t, s, a, b)
}

// TestForkPreload: the preload runs in the template and its functions are in every worker; a
// reset whose new template cannot start (a broken preload) leaves the workers serving, and the
// next one, once the preload is fixed, replaces them.
func TestForkPreload(t *testing.T) {
	t.Parallel()
	dir := forkApp(t)
	preload := filepath.Join(dir, "preload.php")
	s := startServer(t, "workers:\n  runtime: native\n  fork: true\n  count: 2\n  command: php "+filepath.Join(dir, "worker.php")+
		"\n  php_ini:\n    opcache.preload: "+preload+"\n    opcache.preload_user: root\n") // the user is needed when run as root
	a, b := bothWorkers(t, s)
	if !a.Preloaded || !b.Preloaded {
		t.Fatalf("preloaded function missing: %+v %+v", a, b)
	}
	first := s.template(t)
	writeOld(t, preload, "<?php\nfunction preloaded_answer(: string {}\n")
	s.signal(syscall.SIGHUP)
	s.log.waitFor(t, `workers not replaced: the new worker template failed to start`, 30*time.Second)
	if s.template(t) != first || parent(first) != s.cmd.Process.Pid {
		t.Fatalf("template %d replaced by a failed reset", first)
	}
	c, d := bothWorkers(t, s)
	if pids := []int{c.PID, d.PID}; !slices.Contains(pids, a.PID) || !slices.Contains(pids, b.PID) {
		t.Fatalf("workers %d and %d replaced by a failed reset: %v", a.PID, b.PID, pids)
	}
	writeOld(t, preload, "<?php\nfunction preloaded_answer(): string\n{\n    return 'again';\n}\n")
	s.signal(syscall.SIGHUP)
	s.log.waitFor(t, `all workers replaced`, 30*time.Second)
	e, f := bothWorkers(t, s)
	if !e.Preloaded || !f.Preloaded || slices.Contains([]int{e.PID, f.PID}, a.PID) || s.template(t) == first {
		t.Fatalf("after the fixed reset: %+v %+v, template %d (was %d)", e, f, s.template(t), first)
	}
}

// TestForkBootFailure: a forked worker whose script exits at once is reported as an executed
// one is: the server does not start and says what PHP printed and how it exited.
func TestForkBootFailure(t *testing.T) {
	t.Parallel()
	for _, fork := range []bool{true, false} {
		t.Run(fmt.Sprintf("fork=%t", fork), func(t *testing.T) {
			t.Parallel()
			dir := forkApp(t)
			s := launch(t, fmt.Sprintf("workers:\n  runtime: native\n  fork: %t\n  count: 2\n  command: php %s\n", fork, filepath.Join(dir, "exit.php")))
			if code := s.wait(t, 30*time.Second); code != 1 {
				t.Fatalf("exit code %d, want 1", code)
			}
			if started := s.log.count(`"msg":"worker template started"`); started != map[bool]int{true: 1, false: 0}[fork] {
				t.Errorf("%d templates started with fork %t", started, fork)
			}
			// Said once for both workers (issue 15 item 19).
			s.log.waitFor(t, `2 of 2 workers: worker: failed to boot: the process exited before it was ready \(exit code 1\); its last output:\nbootstrap failed: database unreachable`, time.Second)
		})
	}
}
