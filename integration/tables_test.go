package integration

import (
	"context"
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
    chain: { rows: 100000, key: int, columns: { a: int64, b: int64, user: int32 }, indexes: [user] }
    scores: { rows: 16, key: string(12), columns: { score: int64, games: int32, cnt: int64 } }
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

// getAll GETs url requests times from clients goroutines at once and returns the bodies; any
// answer but a 200 fails the test.
func getAll(t *testing.T, clients, requests int, url string) [][]byte {
	t.Helper()
	next := make(chan struct{}, requests)
	for range requests {
		next <- struct{}{}
	}
	close(next)
	var mu sync.Mutex
	var bodies [][]byte
	var failed []string
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				r, err := doErr(t.Context(), "GET", url, nil)
				mu.Lock()
				if err != nil || r.Status != 200 {
					failed = append(failed, fmt.Sprintf("%v %d %s", err, r.Status, r.Body))
				} else {
					bodies = append(bodies, r.Body)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, f := range failed {
		t.Fatal(f)
	}
	return bodies
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
	getAll(t, 8, requests, s.URL+"/incr?n="+strconv.Itoa(each))
	if got := string(get(t, s.URL+"/get?table=counters&key=1").Body); got != `{"n":1000000}` {
		t.Errorf("counter = %s, want 1000000", got)
	}
	// tables.init ran before the workers: its row is there.
	if got := string(get(t, s.URL+"/get?table=counters&key=2").Body); got != `{"n":42}` {
		t.Errorf("the row tables.init wrote = %s", got)
	}
}

// TestTablesWhereUnderWrites: where() over a chain of 20,000 rows answers while three workers
// write that chain without a pause (rewrites, multi-column increments, rows moved out of the
// chain and back), and each answer is one consistent moment: every row whole, at most the 10
// movable rows missing. It used to restart its walk at every write and so answered only once
// the writers stopped.
func TestTablesWhereUnderWrites(t *testing.T) {
	const rows, writers = 100000, 3
	admin := freeAddr(t)
	s := startServer(t, tablesYAML(t, writers+1, "")+"admin:\n  address: "+admin+"\n")
	if got := string(get(t, s.URL+fmt.Sprintf("/chain-fill?n=%d", rows)).Body); got != strconv.Itoa(rows) {
		t.Fatalf("/chain-fill = %s", got)
	}
	type outcome struct {
		Writes  int
		Stopped bool
	}
	done := make(chan outcome, writers)
	for range writers {
		go func() {
			var o outcome
			r, err := doErr(t.Context(), "GET", s.URL+fmt.Sprintf("/chain-write?n=%d", rows), nil)
			if err == nil && r.Status == 200 {
				_ = json.Unmarshal(r.Body, &o)
			}
			done <- o
		}()
	}
	t.Cleanup(func() { // the writers stop within 20 s by themselves, sooner with the flag
		_, _ = doErr(context.Background(), "GET", s.URL+"/set?key=9&n=1", nil)
	})
	eventually(t, 20*time.Second, "the writers running", func() bool {
		return string(get(t, s.URL+"/get?table=counters&key=8").Body) == fmt.Sprintf(`{"n":%d}`, writers)
	})
	const calls = 10
	before := readRetries(t, admin, "chain")
	r := get(t, s.URL+fmt.Sprintf("/chain-where?calls=%d", calls))
	var w struct {
		Min, Max, Bad int
		Ms            float64
	}
	if r.Status != 200 || json.Unmarshal(r.Body, &w) != nil {
		t.Fatalf("/chain-where: %d %s", r.Status, r.Body)
	}
	get(t, s.URL+"/set?key=9&n=1")
	for range writers {
		if o := <-done; !o.Stopped || o.Writes == 0 {
			t.Errorf("a writer %+v: it ran out its 20 s, so where() answered only once the writers stopped", o)
		} else {
			t.Logf("a writer made %d writes", o.Writes)
		}
	}
	// Only the where() calls read the chain table: its retries are theirs. Each call copies
	// without the lock at most 3 times, then walks once under it.
	retries := readRetries(t, admin, "chain") - before
	t.Logf("where() of %d rows under %d writers: %.1f ms a call, %d to %d rows, %d read retries", rows, writers, w.Ms, w.Min, w.Max, retries)
	if retries > 3*calls {
		t.Errorf("%d where() calls started their walk again %d times: want at most 3 each", calls, retries)
	}
	if w.Bad != 0 || w.Min < rows-10 || w.Max > rows {
		t.Errorf("where() under writes: %+v: want every row whole and %d to %d rows", w, rows-10, rows)
	}
}

// readRetries returns table's read_retries as the admin listener at addr reports them.
func readRetries(t *testing.T, addr, table string) int64 {
	t.Helper()
	var list []struct {
		Name        string
		ReadRetries int64 `json:"read_retries"`
	}
	r := get(t, "http://"+addr+"/tables")
	if err := json.Unmarshal(r.Body, &list); err != nil {
		t.Fatalf("GET /tables: %d %s", r.Status, r.Body)
	}
	for _, s := range list {
		if s.Name == table {
			return s.ReadRetries
		}
	}
	t.Fatalf("GET /tables lists no %s: %s", table, r.Body)
	return 0
}

// TestTablesIncrColumnsAndCAS: from 8 clients over 4 workers, 20,000 multi-column increments
// and 20,000 compare-and-set increments lose no update, and no reader ever sees one column of a
// multi-column increment without the other.
func TestTablesIncrColumnsAndCAS(t *testing.T) {
	s := startServer(t, tablesYAML(t, 4, ""))
	const requests, each = 80, 250
	var bad, retries int64
	for _, body := range getAll(t, 8, requests, s.URL+"/score?n="+strconv.Itoa(each)) {
		var o struct{ Bad, Retries int64 }
		if err := json.Unmarshal(body, &o); err != nil {
			t.Fatalf("/score: %s", body)
		}
		bad += o.Bad
		retries += o.Retries
	}
	t.Logf("%d cas() retries for %d increments", retries, requests*each)
	if bad != 0 {
		t.Errorf("%d reads saw score != 5 x games: a multi-column incr() was not atomic", bad)
	}
	want := fmt.Sprintf(`{"score":%d,"games":%d,"cnt":0}`, 5*requests*each, requests*each)
	if got := string(get(t, s.URL+"/gets?key=p").Body); got != want {
		t.Errorf("row p = %s, want %s", got, want)
	}
	want = fmt.Sprintf(`{"score":0,"games":0,"cnt":%d}`, requests*each)
	if got := string(get(t, s.URL+"/gets?key=q").Body); got != want {
		t.Errorf("row q = %s, want %s", got, want)
	}
}

// TestTablesWritersKilled: writers SIGKILLed in a loop while they rewrite, increment (two
// columns at once) and delete checksummed rows leave no lock held (the writes go on) and no torn row (every row matches its
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
	if code != 0 || json.Unmarshal([]byte(out), &ts) != nil || len(ts) != 5 {
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
