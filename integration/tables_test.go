package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// tablesYAML is the config of the shared-tables tests: table.php's tables, filled by
// table-init.php.
func tablesYAML(t *testing.T, workers int, extra string) string {
	return fmt.Sprintf(`workers:
  command: php %s
  runtime: native
  count: %d
%stables:
  init: php %s
  define:
    counters: { rows: 10, key: int, columns: { n: int64 } }
    rows: { rows: 1000, key: int, columns: { a: int64, b: int64, s: string(40), user: int32, sum: int64 }, indexes: [user] }
    small: { rows: 5, key: string(10), columns: { v: int8 } }
`, fixture(t, "table.php"), workers, extra, fixture(t, "table-init.php"))
}

func segmentPath(s *server) string {
	return filepath.Join("/dev/shm", "peregrine-tables-"+strconv.Itoa(s.cmd.Process.Pid))
}

// busyWorkers lists the pids of the workers that the admin endpoint at addr shows running a
// request; none when it cannot be asked.
func busyWorkers(t *testing.T, addr string) []int {
	t.Helper()
	r, err := doErr(t.Context(), "GET", "http://"+addr+"/workers", nil)
	if err != nil || r.Status != http.StatusOK {
		return nil
	}
	var list []struct {
		PID   int    `json:"pid"`
		State string `json:"state"`
	}
	if json.Unmarshal(r.Body, &list) != nil {
		return nil
	}
	var pids []int
	for _, w := range list {
		if w.State == "busy" && w.PID > 0 {
			pids = append(pids, w.PID)
		}
	}
	return pids
}

// workerPIDs lists the server's PHP processes (its own pid carries the tag too).
func workerPIDs(s *server) []int {
	var pids []int
	for _, pid := range processesTagged(s.tag) {
		if pid != s.cmd.Process.Pid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestTablesCounterExact: every worker incrementing one counter, 1,000,000 increments in all,
// from 8 clients at once over 4 workers, lose none; workers exec'd and forked alike.
func TestTablesCounterExact(t *testing.T) {
	for _, fork := range []bool{false, true} {
		t.Run(fmt.Sprintf("fork=%v", fork), func(t *testing.T) { counterExact(t, fork) })
	}
}

func counterExact(t *testing.T, fork bool) {
	s := startServer(t, tablesYAML(t, 4, fmt.Sprintf("  fork: %v\n", fork)))
	const requests, each = 100, 10_000
	var wg sync.WaitGroup
	next := make(chan struct{}, requests)
	for range requests {
		next <- struct{}{}
	}
	close(next)
	errs := make(chan string, requests)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				r, err := doErr(t.Context(), "GET", s.URL+"/incr?n="+strconv.Itoa(each), nil)
				if err != nil || r.Status != 200 {
					errs <- fmt.Sprintf("%v %d %s", err, r.Status, r.Body)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	if got := string(get(t, s.URL+"/get?table=counters&key=1").Body); got != `{"n":1000000}` {
		t.Errorf("counter = %s, want 1000000", got)
	}
	// tables.init ran before the workers: its row is there.
	if got := string(get(t, s.URL+"/get?table=counters&key=2").Body); got != `{"n":42}` {
		t.Errorf("the row tables.init wrote = %s", got)
	}
}

// TestTablesWritersKilled: writers SIGKILLed in a loop while they rewrite and delete
// checksummed rows leave no lock held (the writes go on) and no torn row (every row matches its
// checksum, by iteration, get() and the index), and the rows used stay what the rows say.
func TestTablesWritersKilled(t *testing.T) {
	for _, fork := range []bool{false, true} {
		t.Run(fmt.Sprintf("fork=%v", fork), func(t *testing.T) { writersKilled(t, fork) })
	}
}

func writersKilled(t *testing.T, fork bool) {
	admin := freeAddr(t)
	s := startServer(t, tablesYAML(t, 4, fmt.Sprintf("  max_queue: 0\n  fork: %v\n", fork))+"admin:\n  address: "+admin+"\n")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = doErr(t.Context(), "GET", s.URL+"/write?rows=200&loops=5000", nil) // 502 when its worker is killed
			}
		}()
	}
	// Readers check every row against its checksum while the writers write and die: a reader
	// never sees half a row.
	var torn sync.Map
	var checks atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := doErr(t.Context(), "GET", s.URL+"/check", nil)
				var c struct{ Bad int }
				if err != nil || r.Status != 200 || json.Unmarshal(r.Body, &c) != nil { // its worker killed
					continue
				}
				checks.Add(1)
				if c.Bad != 0 {
					torn.Store(string(r.Body), true)
				}
			}
		}()
	}
	// Kills until 60 landed: on a loaded machine a replaced worker takes longer to boot, so
	// the count of kills, not a time, ends the test (bounded by a deadline all the same). Only
	// workers the server lists as busy are killed: in the middle of a request, where a lock
	// may be held. A process killed while it boots would only slow the next boot (the
	// supervisor's backoff) and leave fewer kills to land.
	kills := 0
	deadline := time.Now().Add(45 * time.Second)
	for kills < 60 && time.Now().Before(deadline) {
		if pids := busyWorkers(t, admin); len(pids) > 0 {
			if syscall.Kill(pids[rand.Intn(len(pids))], syscall.SIGKILL) == nil {
				kills++
			}
		}
		time.Sleep(time.Duration(20+rand.Intn(40)) * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if kills < 50 {
		t.Fatalf("only %d kills", kills)
	}
	torn.Range(func(k, _ any) bool {
		t.Errorf("a reader saw rows off their checksum during the writes: %s", k)
		return true
	})
	if checks.Load() == 0 {
		t.Error("no check completed during the writes")
	}
	// No deadlock: writes still go through, in bounded time.
	eventually(t, 30*time.Second, "a write after the kills", func() bool {
		r, err := doErr(t.Context(), "GET", s.URL+"/write?rows=200&loops=100", nil)
		return err == nil && r.Status == 200
	})
	r := get(t, s.URL+"/check")
	var c struct{ Rows, Count, Indexed, Bad int }
	if err := json.Unmarshal(r.Body, &c); err != nil {
		t.Fatalf("/check: %d %s", r.Status, r.Body)
	}
	t.Logf("%d kills, %d checks during the writes; %+v", kills, checks.Load(), c)
	if c.Bad != 0 || c.Rows == 0 || c.Rows != c.Count || c.Indexed != c.Rows {
		t.Errorf("after %d kills: %+v: want no bad row, as many rows as count() and the index says", kills, c)
	}
}

// TestTablesSurviveAndGo: rows survive a worker's kill and a reset; peregrine tables and the
// metrics report them; a full table is an exception, not a crash; the segment goes at stop.
func TestTablesSurviveAndGo(t *testing.T) {
	addr := freeAddr(t)
	s := startServer(t, tablesYAML(t, 2, "")+"admin:\n  address: "+addr+"\n")
	seg := segmentPath(s)
	if _, err := os.Stat(seg); err != nil {
		t.Fatalf("no segment: %v", err)
	}
	get(t, s.URL+"/set?key=5&n=77")
	for _, pid := range workerPIDs(s) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	eventually(t, 30*time.Second, "the row after the workers' kill", func() bool {
		r, err := doErr(t.Context(), "GET", s.URL+"/get?table=counters&key=5", nil)
		return err == nil && string(r.Body) == `{"n":77}`
	})
	cfg := filepath.Join(s.dir, "peregrine.yaml")
	eventually(t, 30*time.Second, "both replacements ready", func() bool { // a reset refuses starting workers
		out, code := runCLI(t, s.dir, nil, "workers", "-c", cfg, "--json")
		return code == 0 && strings.Count(out, `"state": "ready"`) == 2
	})
	if out, code := runCLI(t, s.dir, nil, "reset", "-c", cfg); code != 0 {
		t.Fatalf("reset: %s", out)
	}
	if got := string(get(t, s.URL+"/get?table=counters&key=5").Body); got != `{"n":77}` {
		t.Errorf("after reset: %s", got)
	}
	s.signal(syscall.SIGHUP)
	s.log.waitFor(t, `cause":"SIGHUP[\s\S]*all workers replaced`, 30*time.Second)
	if got := string(get(t, s.URL+"/get?table=counters&key=5").Body); got != `{"n":77}` {
		t.Errorf("after SIGHUP: %s", got)
	}

	if got := string(get(t, s.URL+"/fill").Body); got != "table small is full: all its 5 rows are used (raise tables.define.small.rows)" {
		t.Errorf("/fill = %q", got)
	}
	if r := get(t, s.URL+"/pid"); r.Status != 200 {
		t.Errorf("after a full table: %d", r.Status)
	}

	out, code := runCLI(t, s.dir, nil, "tables", "-c", cfg, "--json")
	var ts []struct {
		Name                  string
		Rows, Capacity, Bytes int64
	}
	if code != 0 || json.Unmarshal([]byte(out), &ts) != nil || len(ts) != 3 {
		t.Fatalf("peregrine tables --json: %d %s", code, out)
	}
	if ts[0].Name != "counters" || ts[0].Rows != 2 || ts[0].Capacity != 10 || ts[2].Name != "small" || ts[2].Rows != 5 || ts[1].Bytes < 1000*56 {
		t.Errorf("peregrine tables: %+v", ts)
	}
	if out, code := runCLI(t, s.dir, nil, "tables", "-c", cfg); code != 0 || !strings.Contains(out, "counters") || !strings.Contains(out, "CAPACITY") {
		t.Errorf("peregrine tables: %d %s", code, out)
	}
	if v := metric(t, "http://"+addr, `peregrine_table_rows{table="small"}`); v != 5 {
		t.Errorf("peregrine_table_rows{small} = %v", v)
	}

	s.stop(t)
	if _, err := os.Stat(seg); !os.IsNotExist(err) {
		t.Errorf("the segment outlived the server: %v", err)
	}
}

// TestTablesSweepAndInitFailure: a server killed with SIGKILL leaves its segment, which the next
// start removes; a failing tables.init fails the start with its error.
func TestTablesSweepAndInitFailure(t *testing.T) {
	s := startServer(t, tablesYAML(t, 1, ""))
	seg := segmentPath(s)
	s.signal(syscall.SIGKILL)
	s.wait(t, 10*time.Second)
	for _, pid := range workerPIDs(s) { // Pdeathsig ends them; do not wait on it
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if _, err := os.Stat(seg); err != nil {
		t.Fatalf("a killed server's segment: %v", err)
	}
	s2 := startServer(t, tablesYAML(t, 1, ""))
	if _, err := os.Stat(seg); !os.IsNotExist(err) {
		t.Errorf("the dead server's segment was not swept: %v", err)
	}
	s2.stop(t)

	f := launch(t, tablesYAML(t, 1, "  env: { TABLE_INIT_FAIL: '1' }\n"))
	if code := f.wait(t, 30*time.Second); code == 0 {
		t.Fatal("a failing tables.init did not fail the start")
	}
	if log := f.log.String(); !strings.Contains(log, "tables.init") || !strings.Contains(log, "the contest data is missing") {
		t.Errorf("the start's error does not tell why:\n%s", log)
	}
	if _, err := os.Stat(segmentPath(f)); !os.IsNotExist(err) {
		t.Errorf("a failed start left its segment: %v", err)
	}
}

// TestTablesInitHasNoTimeLimit: tables.init runs to its end however long it loads, as php from
// a shell would, even where php.ini or workers.php_ini set max_execution_time for requests (the
// HighLoad Cup example's full data took longer than Debian's 30 s on a slow host).
func TestTablesInitHasNoTimeLimit(t *testing.T) {
	s := startServer(t, tablesYAML(t, 1, "  env: { TABLE_INIT_CPU_MS: '2500' }\n  php_ini: { max_execution_time: '1' }\n"))
	if got := string(get(t, s.URL+"/get?table=counters&key=2").Body); got != `{"n":42}` {
		t.Errorf("the row tables.init wrote = %s", got)
	}
}

// TestHighLoadCupExample: examples/highloadcup at the small size answers a fixed list of the
// contest's requests (GETs of every kind, POST updates and creations, each followed by GETs that
// must see them on either of two workers) exactly as reference.php computes them in plain PHP
// from the same JSON.
func TestHighLoadCupExample(t *testing.T) {
	ex, err := filepath.Abs(filepath.Join("..", "examples", "highloadcup"))
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	php := func(args ...string) []byte {
		cmd := exec.Command("php", args...)
		cmd.Dir = ex
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("php %v: %v\n%s", args, err, stderr.String())
		}
		return out
	}
	php("generate.php", data, "small")
	queries := filepath.Join(data, "queries.jsonl")
	if err := os.WriteFile(queries, php("queries.php", data, "400"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSpace(string(php("reference.php", data, queries))), "\n")

	s := startServer(t, fmt.Sprintf(`workers:
  command: php %[1]s/server.php
  runtime: native
  count: 2
  env: { HLC_DATA: %[2]s }
tables:
  init: php %[1]s/load.php
  define:
    users: { rows: 2000, key: int, columns: { email: string(48), first_name: string(32), last_name: string(32), gender: int8, birth_date: int64 } }
    locations: { rows: 2000, key: int, columns: { place: string(48), country: string(32), city: string(32), distance: int32 } }
    visits: { rows: 20000, key: int, columns: { location: int32, user: int32, visited_at: int64, mark: int8 }, indexes: [user, location] }
`, ex, data))
	lines, err := os.ReadFile(queries)
	if err != nil {
		t.Fatal(err)
	}
	var kinds = map[string]int{}
	for i, line := range strings.Split(strings.TrimSpace(string(lines)), "\n") {
		var q struct {
			Method, Path string
			Body         *string
		}
		var w struct {
			Status int
			Body   any
		}
		if err := json.Unmarshal([]byte(line), &q); err != nil || json.Unmarshal([]byte(want[i]), &w) != nil {
			t.Fatalf("query %d: %s / %s", i, line, want[i])
		}
		var body io.Reader
		if q.Body != nil {
			body = strings.NewReader(*q.Body)
		}
		r := do(t, q.Method, s.URL+q.Path, body)
		kinds[fmt.Sprintf("%s %d", q.Method, r.Status)]++
		if r.Status != w.Status {
			t.Errorf("%d: %s %s: status %d, want %d (%s)", i, q.Method, q.Path, r.Status, w.Status, r.Body)
			continue
		}
		var got any
		if err := json.Unmarshal(r.Body, &got); err != nil {
			t.Errorf("%d: %s %s: not JSON: %s", i, q.Method, q.Path, r.Body)
			continue
		}
		if w.Status == 200 && !reflect.DeepEqual(got, w.Body) {
			t.Errorf("%d: %s %s:\n got %s\nwant %s", i, q.Method, q.Path, r.Body, want[i])
		}
	}
	t.Logf("answers by method and status: %v", kinds)
	if kinds["GET 200"] < 200 || kinds["POST 200"] < 20 || kinds["GET 400"] == 0 || kinds["GET 404"] == 0 || kinds["POST 400"] == 0 {
		t.Errorf("the query list misses a kind of answer: %v", kinds)
	}
}

// TestTablesCLIRuntime: under the cli runtime, Table::open says tables need the native runtime.
func TestTablesCLIRuntime(t *testing.T) {
	s := startServer(t, fmt.Sprintf("workers:\n  command: php %s\n  runtime: cli\n  count: 1\ntables:\n  define:\n    counters: { rows: 10, key: int, columns: { n: int64 } }\n",
		fixture(t, "table.php")))
	r := get(t, s.URL+"/open?table=counters")
	if r.Status != 500 || !strings.Contains(string(r.Body), "table counters: shared tables need the native runtime (workers.runtime: native") {
		t.Errorf("Table::open under the cli runtime: %d %s", r.Status, r.Body)
	}
}
