package nativetest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The memory tests take a minute or two; make test-native runs them with
// PEREGRINE_NATIVE_MEMORY=1.
func memoryTests(t *testing.T) {
	t.Helper()
	if os.Getenv("PEREGRINE_NATIVE_MEMORY") == "" {
		t.Skip("set PEREGRINE_NATIVE_MEMORY=1 (make test-native does)")
	}
}

// mixed returns the i-th request of a mix that goes through every per-request path: headers,
// exit, uploads, sessions, shutdown functions, ini changes, exceptions, unread bodies.
func mixed(t *testing.T, i int, dir string) request {
	t.Helper()
	switch i % 16 {
	case 0:
		return caseRequest("headers", request{})
	case 1:
		return caseRequest("location", request{})
	case 2:
		return caseRequest("input", post("application/json", []byte(`{"n":`+strconv.Itoa(i)+`}`)))
	case 3:
		return caseRequest("form", post("application/x-www-form-urlencoded", []byte("a=1&b[]=2&c[d]=3")))
	case 4:
		ct, body := multipartBody(t, map[string]string{"f": "v"}, multipartFile{"keep", "a.txt", 300}, multipartFile{"other", "b.txt", 300})
		r := post(ct, body)
		r.URI = "/upload.php?dest=" + filepath.Join(dir, "moved")
		return caseRequest("upload", r)
	case 5:
		return caseRequest("session", request{URI: "/session.php?user=u" + strconv.Itoa(i)})
	case 6:
		return caseRequest("shutdown", request{})
	case 7:
		return caseRequest("ini", request{})
	case 8:
		return caseRequest("throw", request{})
	case 9:
		return caseRequest("server", request{URI: "/server.php?q=" + strconv.Itoa(i), Headers: []field{{"cookie", "a=b"}, {"x-multi", "1"}, {"x-multi", "2"},
			{"authorization", "Basic dXNlcjpwdw=="}, {"authorization", "Basic c2Vjb25kOng="}}})
	case 10:
		return caseRequest("noread", request{Method: "PUT", Body: make([]byte, 100<<10), Headers: []field{{"content-length", "102400"}}})
	case 11:
		return caseRequest("badstatus", request{URI: "/badstatus.php?code=1000"})
	case 12:
		return caseRequest("stdio", request{})
	case 13:
		return caseRequest("reqheaders", request{Headers: []field{{"x-multi", "1"}, {"123", "x"}, {"x-multi", "2"}}})
	case 14:
		// Header names no request had before: past the names the runtime keeps (512), their
		// keys are made and freed with the request.
		r := serverAllRequest()
		r.Headers = append(r.Headers, field{"x-a" + strconv.Itoa(i), "1"}, field{"x-b" + strconv.Itoa(i), "2"})
		return r
	}
	return caseRequest("die", request{})
}

// TestValgrind runs a few hundred requests of the mix under memcheck in each mode (PHP's
// allocator off, so every request allocation is checked) and stops the process cleanly.
func TestValgrind(t *testing.T) {
	memoryTests(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			p := startEnv(t, []string{"USE_ZEND_ALLOC=0"}, memcheck(t, m)...)
			if f := p.readFrame(t); f.Type != typeReady {
				t.Fatalf("first frame type %d, want READY", f.Type)
			}
			for i := range 400 {
				if a := p.do(t, mixed(t, i, dir)); a.Status == 0 {
					t.Fatalf("request %d: no status", i)
				}
			}
			// Then a fatal error: classic mode goes on, a worker answers and exits with 255.
			wantStatus(t, p.do(t, caseRequest("usererror", request{})), 500)
			want := 255
			if !m.worker {
				wantStatus(t, p.do(t, caseRequest("hello", request{})), 200)
				<-p.write(appendFrame(nil, typeStop, 0, nil))
				want = 0
			}
			if code := p.waitExit(t); code != want {
				t.Errorf("under valgrind: exit status %d, want %d (99: memcheck found errors):\n%s", code, want, p.log)
			}
		})
	}
}

// memcheck returns the command that runs the mode under valgrind's memcheck, which exits with
// 99 when it found errors.
func memcheck(t *testing.T, m mode) []string {
	t.Helper()
	valgrind, err := exec.LookPath("valgrind")
	if err != nil {
		t.Fatal("valgrind is not installed (apt-get install valgrind)")
	}
	ini, _ := limits(t)
	ini = append(ini, "user_ini.cache_ttl=0") // testdata/cases/.user.ini read again every second
	return append([]string{valgrind, "-q", "--error-exitcode=99", "--num-callers=30",
		"--suppressions=" + filepath.Join(filepath.Dir(cases), "..", "..", "valgrind.supp")}, m.argv(ini...)...)
}

func rss(t *testing.T, pid int) int {
	t.Helper()
	return statusKB(t, pid, "VmRSS")
}

// statusKB is a field of /proc/PID/status given in kB (VmRSS, VmSize).
func statusKB(t *testing.T, pid int, field string) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for s := bufio.NewScanner(f); s.Scan(); {
		if v, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return kb
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// heap returns the worker's memory_get_usage() (0 in classic mode, where every request starts
// from an empty heap).
func heap(t *testing.T, p *proc, m mode) int {
	t.Helper()
	if !m.worker {
		return 0
	}
	a := p.do(t, caseRequest("sapi", request{URI: "/memory", Params: []field{{"PATH_INFO", "/memory"}}}))
	n, err := strconv.Atoi(a.Body)
	if err != nil {
		t.Fatalf("memory_get_usage(): %q", a.Body)
	}
	return n
}

// TestRSS: after a warm-up, thousands more requests of the mix leave the process's resident
// memory where it was (within 1 MiB: PHP's allocator keeps 2 MiB chunks around).
func TestRSS(t *testing.T) {
	memoryTests(t)
	const warm, more = 600, 4800
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			ini, _ := limits(t)
			dir := t.TempDir()
			p := start(t, m.argv(ini...)...)
			for i := range warm {
				p.do(t, mixed(t, i, dir))
			}
			before, heapBefore := rss(t, p.cmd.Process.Pid), heap(t, p, m)
			for i := range more {
				p.do(t, mixed(t, warm+i, dir))
			}
			after, heapAfter := rss(t, p.cmd.Process.Pid), heap(t, p, m)
			t.Logf("%s mode: RSS %d KiB after %d requests, %d KiB after %d more (%+.1f bytes per request)",
				m.name, before, warm, after, more, float64(after-before)*1024/more)
			if after-before > 1024 {
				t.Errorf("RSS grew by %d KiB over %d requests", after-before, more)
			}
			if m.worker {
				t.Logf("worker mode: PHP heap %d bytes after %d requests, %d after %d more", heapBefore, warm, heapAfter, more)
				if heapAfter-heapBefore > 16<<10 {
					t.Errorf("the worker's PHP heap grew by %d bytes over %d requests", heapAfter-heapBefore, more)
				}
			}
		})
	}
}
