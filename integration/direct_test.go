package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Direct mode (http.direct, docs/direct.md) with the real binary: the workers accept and
// answer HTTP themselves, and supervision still holds.

const directConfig = "http:\n  direct: true\nworkers:\n  runtime: native\n  command: php %s\n  count: 2\n"

func startDirectApp(t *testing.T, extra string) *server {
	t.Helper()
	return startServer(t, strings.Replace(directConfig, "%s", fixture(t, "app.php"), 1)+extra)
}

// directLoad runs n clients that loop on method /sleep?ms=0&id=N (N unique) until stop, and
// counts. Go's client does not send a POST again when its kept-alive connection closes under
// it (it does a GET), so with POST every connection a draining worker closes with a request
// on the wire is a failure counted here; and the worker logs each id it runs, so an id run
// twice is a request PHP began whose answer was lost (and sent again, as a GET is).
type directLoad struct {
	ok, failed atomic.Int64
	next       atomic.Int64
	mu         sync.Mutex
	errs       []string
	wg         sync.WaitGroup
	cancel     context.CancelFunc
	s          *server
}

func startDirectLoad(t *testing.T, s *server, n int, method string) *directLoad {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &directLoad{cancel: cancel, s: s}
	for range n {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for ctx.Err() == nil {
				url := s.URL + "/sleep?ms=0&id=" + strconv.FormatInt(l.next.Add(1), 10)
				var body io.Reader
				if method == http.MethodPost {
					body = strings.NewReader("hello")
				}
				r, err := doErr(context.Background(), method, url, body)
				if err != nil || r.Status != 200 {
					l.failed.Add(1)
					l.mu.Lock()
					l.errs = append(l.errs, strconv.Itoa(r.Status)+" "+strings.TrimSpace(string(r.Body))+" "+errString(err))
					l.mu.Unlock()
					continue
				}
				l.ok.Add(1)
			}
		}()
	}
	return l
}

func (l *directLoad) stop(t *testing.T) {
	t.Helper()
	l.cancel()
	l.wg.Wait()
	for _, e := range l.errs {
		t.Errorf("failed request: %s", e)
	}
	if l.failed.Load() != 0 || l.ok.Load() == 0 {
		t.Fatalf("%d ok, %d failed", l.ok.Load(), l.failed.Load())
	}
	ran := map[string]int{}
	for _, m := range sleptRE.FindAllStringSubmatch(l.s.log.String(), -1) {
		ran[m[1]]++
	}
	for id, n := range ran {
		if n > 1 {
			t.Errorf("request %s ran %d times: the answer of a request PHP began was lost", id, n)
		}
	}
	if len(ran) == 0 {
		t.Fatal("the workers logged no request")
	}
}

var sleptRE = regexp.MustCompile(`sleeping in /sleep\?ms=0&id=(\d+)\b`)

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestDirectServes: the workers answer, each with its own pid, and the banner names the
// address they serve.
func TestDirectServes(t *testing.T) {
	t.Parallel()
	s := startDirectApp(t, "")
	pids := map[int]bool{}
	for i := 0; i < 200 && len(pids) < 2; i++ {
		r, err := doErr(context.Background(), "GET", s.URL+"/pid", nil, "Connection", "close")
		if err != nil || r.Status != 200 {
			t.Fatalf("/pid: %v %d", err, r.Status)
		}
		pid, _ := strconv.Atoi(string(r.Body))
		pids[pid] = true
	}
	if len(pids) != 2 {
		t.Errorf("answered by %d workers, want both", len(pids))
	}
	if r := do(t, "POST", s.URL+"/echo", strings.NewReader("a=1")); r.Status != 200 || !strings.Contains(string(r.Body), `"bodyHex":"613d31"`) {
		t.Errorf("/echo: %d %s", r.Status, r.Body)
	}
}

// TestDirectWorkersCount: `peregrine workers` (the admin listener's GET /workers) shows the
// requests each worker counted itself in the shared counters (the pool hands them none), and
// /metrics their sums.
func TestDirectWorkersCount(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	s := startDirectApp(t, "admin:\n  address: "+addr+"\n")
	for range 10 {
		get(t, s.URL+"/pid")
	}
	var ws []struct {
		PID      int   `json:"pid"`
		Requests int64 `json:"requests"`
	}
	eventually(t, 10*time.Second, "the counts", func() bool {
		if err := json.Unmarshal(get(t, "http://"+addr+"/workers").Body, &ws); err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, w := range ws {
			total += w.Requests
		}
		return total == 10
	})
	if n := metric(t, "http://"+addr, "peregrine_direct_requests_total"); n != 10 {
		t.Errorf("peregrine_direct_requests_total %v, want 10", n)
	}
	if n := metric(t, "http://"+addr, `peregrine_direct_responses_total{status_class="2xx"}`); n != 10 {
		t.Errorf("2xx answers %v, want 10", n)
	}
}

// TestDirectRefusedAtStart: a setting that needs the server's front stops the start with a
// message naming its key.
func TestDirectRefusedAtStart(t *testing.T) {
	t.Parallel()
	s := launch(t, strings.Replace(strings.Replace(directConfig, "%s", fixture(t, "app.php"), 1), "runtime: native", "runtime: cli", 1))
	if code := s.wait(t, 30*time.Second); code == 0 {
		t.Fatal("started with workers.runtime cli in direct mode")
	}
	if !strings.Contains(s.log.String(), "workers.runtime: http.direct") {
		t.Errorf("the refusal does not name the key:\n%s", s.log.String())
	}
}

// TestDirectResetUnderLoadFailsNothing: SIGHUP replaces every worker while clients keep
// asking: the old workers drain (stop accepting, finish, Connection: close) while the new ones
// accept on the same socket, and no request fails.
func TestDirectResetUnderLoadFailsNothing(t *testing.T) {
	t.Parallel()
	s := startDirectApp(t, "")
	before := map[int]bool{pidOf(t, s): true, pidOf(t, s): true}
	l := startDirectLoad(t, s, 16, http.MethodPost)
	resetThrice(t, s)
	l.stop(t)
	wantNewWorkers(t, s, before)
}

// resetThrice sends SIGHUP three times, each after the last reset is over.
func resetThrice(t *testing.T, s *server) {
	t.Helper()
	for i := 1; i <= 3; i++ {
		s.signal(syscall.SIGHUP)
		eventually(t, 30*time.Second, "reset "+strconv.Itoa(i), func() bool { return s.log.count(`all workers replaced`) >= i })
	}
}

// wantNewWorkers checks that none of the workers in before answers any more.
func wantNewWorkers(t *testing.T, s *server, before map[int]bool) {
	t.Helper()
	for range 4 {
		if before[pidOf(t, s)] {
			t.Fatal("an old worker still serves after SIGHUP")
		}
	}
}

// TestDirectMaxJobsFailsNothing: workers that leave by themselves after max_jobs are
// replaced at once (not as crashes, without backoff), and no request fails meanwhile.
func TestDirectMaxJobsFailsNothing(t *testing.T) {
	t.Parallel()
	s := startDirectApp(t, "  max_jobs: 100\n")
	l := startDirectLoad(t, s, 16, http.MethodPost)
	eventually(t, 60*time.Second, "twenty retirements", func() bool { return s.log.count(`"reason":"retired"`) >= 20 })
	l.stop(t)
	if n := s.log.count(`worker failed`); n != 0 {
		t.Errorf("%d workers reported as failed:\n%s", n, s.log.String())
	}
}

// TestDirectKillOneWorker: kill -9 of a worker loses only its own connections; the other
// worker and the replacement serve everything after.
func TestDirectKillOneWorker(t *testing.T) {
	t.Parallel()
	s := startDirectApp(t, "")
	victim := pidOf(t, s)
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// GET: a connection of the killed worker kept alive in the client's pool fails the request
	// sent on it, which Go's client sends again only when it may (docs/direct.md).
	l := startDirectLoad(t, s, 4, http.MethodGet)
	eventually(t, 30*time.Second, "the replacement", func() bool { return s.log.count(`worker started`) >= 1 })
	for range 20 {
		if pidOf(t, s) == victim {
			t.Fatal("the killed worker answered")
		}
	}
	l.stop(t)
}

// TestDirectDocumentRootAsProxied: $_SERVER['DOCUMENT_ROOT'] is what the proxied front gives
// PHP for the same config. Direct mode refuses http.root, and without one the proxied front
// passes no DOCUMENT_ROOT to the native runtime (docroot.Root.Params): so neither has it, and
// the daemon sets no PEREGRINE_DOCUMENT_ROOT (native/direct.c would pass it on).
func TestDirectDocumentRootAsProxied(t *testing.T) {
	t.Parallel()
	proxied := startServer(t, strings.Replace(strings.Replace(directConfig, "%s", fixture(t, "app.php"), 1), "  direct: true\n", "", 1))
	direct := startDirectApp(t, "")
	want, got := get(t, proxied.URL+"/document-root"), get(t, direct.URL+"/document-root")
	if want.Status != 200 || got.Status != 200 || string(got.Body) != string(want.Body) {
		t.Errorf("DOCUMENT_ROOT in direct mode: %d %s, proxied: %d %s", got.Status, got.Body, want.Status, want.Body)
	}
}
