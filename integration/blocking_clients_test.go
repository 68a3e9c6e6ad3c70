package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// What blocks a concurrent worker on the native runtime (docs/concurrency.md, "What still
// blocks the worker"), measured by order, not by time: two requests to one worker with
// concurrency 2 each wait at an other end (PostgreSQL, or an HTTP endpoint here) that answers
// "met" only once both have reached it. A call that blocks the worker holds the second request
// until the first one's wait is over, so the first is answered "alone" (the barrier's deadline)
// and the second after it. testdata/workers/blocking-clients.php makes the calls.

// barrier is an HTTP endpoint whose GET /?key=K&n=N answers "met" once N requests with key K
// have arrived, or "alone" after wait (a query parameter too, in seconds) without them.
type barrier struct {
	mu      sync.Mutex
	arrived map[string]int
	met     map[string]chan struct{}
}

func (b *barrier) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	n, _ := strconv.Atoi(q.Get("n"))
	wait, _ := time.ParseDuration(q.Get("wait") + "s")
	key := q.Get("key")
	b.mu.Lock()
	if b.met[key] == nil {
		b.met[key] = make(chan struct{})
	}
	met := b.met[key]
	b.arrived[key]++
	if b.arrived[key] == n {
		close(met)
	}
	b.mu.Unlock()
	select {
	case <-met:
		fmt.Fprint(w, "met")
	case <-time.After(wait):
		fmt.Fprint(w, "alone")
	case <-r.Context().Done():
	}
}

func startBarrier(t *testing.T) string {
	t.Helper()
	s := httptest.NewServer(&barrier{arrived: map[string]int{}, met: map[string]chan struct{}{}})
	t.Cleanup(s.Close)
	return s.URL
}

// twoAtOnce sends two requests at once to a worker that holds two and returns their bodies.
func twoAtOnce(t *testing.T, s *server, path string) []string {
	t.Helper()
	bodies := make([]string, 2)
	var wg sync.WaitGroup
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := doErr(context.Background(), "GET", s.URL+path, nil)
			if err != nil || r.Status != 200 {
				t.Errorf("GET %s: %v %d %s", path, err, r.Status, r.Body)
				return
			}
			bodies[i] = string(r.Body)
		}()
	}
	wg.Wait()
	return bodies
}

// startBlockingClients serves blocking-clients.php from one native worker holding two requests,
// with an admin listener whose address it returns.
func startBlockingClients(t *testing.T, execTimeout string) (*server, string) {
	t.Helper()
	addr := freeAddr(t)
	s := startServer(t, "workers:\n  runtime: native\n  command: php "+fixture(t, "blocking-clients.php")+
		"\n  count: 1\n  concurrency: 2\n  exec_timeout: "+execTimeout+"\nadmin:\n  address: "+addr+"\n")
	return s, "http://" + addr
}

// barrierURL is the address of the barrier at end that waits for n callers of key.
func barrierURL(end, key string, n int) string {
	return end + "/?" + url.Values{"key": {key}, "n": {strconv.Itoa(n)}, "wait": {"10"}}.Encode()
}

// TestCurlUnderConcurrency: curl_exec() and curl_multi_exec() with curl_multi_select() of a
// local endpoint that answers once every call has reached it: two requests at once in one
// worker, and two calls at once in one request through async(). A blocking call would have the
// endpoint answer the first "alone".
func TestCurlUnderConcurrency(t *testing.T) {
	t.Parallel()
	s, _ := startBlockingClients(t, "60s")
	end := startBarrier(t)
	for _, c := range []struct {
		name, path string
		calls      int // calls to the endpoint in one request
	}{
		{"curl_exec", "/curl", 1},
		{"curl_exec twice through async()", "/curl-two", 2},
		{"curl_multi one handle", "/multi", 1},
		{"curl_multi two handles", "/multi", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := url.Values{"url": {barrierURL(end, c.name, 2*c.calls)}, "n": {strconv.Itoa(c.calls)}}
			want := strings.TrimSpace(strings.Repeat("met ", c.calls))
			for _, b := range twoAtOnce(t, s, c.path+"?"+q.Encode()) {
				if b != want {
					t.Errorf("%s answered %q, want %q", c.path, b, want)
				}
			}
		})
	}
}

// postgres makes a role and a database of the test's own on the local PostgreSQL, with the
// barrier(n) function, and returns a libpq connection string for them; both are dropped at
// cleanup. It skips the test when no PostgreSQL answers on 127.0.0.1:5432.
func postgres(t *testing.T) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", "127.0.0.1:5432", 2*time.Second)
	if err != nil {
		t.Skipf("PostgreSQL is not reachable on 127.0.0.1:5432 (%v)", err)
	}
	c.Close()
	name := "peregrine_it_" + randomTag()
	admin := "host=127.0.0.1 dbname=postgres user=postgres"
	mine := "host=127.0.0.1 dbname=" + name + " user=" + name
	pgExec(t, admin, "CREATE ROLE "+name+" LOGIN", "CREATE DATABASE "+name+" OWNER "+name)
	t.Cleanup(func() { pgExec(t, admin, "DROP DATABASE "+name+" WITH (FORCE)", "DROP ROLE "+name) })
	// barrier(n) counts its callers in a sequence (which no transaction hides) and returns 'met'
	// once n have arrived, or 'alone' after 10 s.
	pgExec(t, mine, "CREATE SEQUENCE arrivals", `CREATE FUNCTION barrier(n int) RETURNS text LANGUAGE plpgsql AS $$
DECLARE deadline timestamptz := clock_timestamp() + interval '10 seconds';
BEGIN
  PERFORM nextval('arrivals');
  LOOP
    IF (SELECT last_value FROM arrivals) >= n THEN RETURN 'met'; END IF;
    IF clock_timestamp() > deadline THEN RETURN 'alone'; END IF;
    PERFORM pg_sleep(0.01);
  END LOOP;
END $$`)
	return mine
}

// pgExec runs each statement on a connection to dsn, with PHP's pgsql.
func pgExec(t *testing.T, dsn string, statements ...string) {
	t.Helper()
	code := `$c = pg_connect($argv[1]) or exit(1); foreach (array_slice($argv, 2) as $s) { if (!pg_query($c, $s)) { exit(1); } }`
	if out, err := exec.Command("php", append([]string{"-r", code, "--", dsn}, statements...)...).CombinedOutput(); err != nil {
		t.Fatalf("PostgreSQL %q: %v\n%s", statements, err, out)
	}
}

// TestPostgresUnderConcurrency: pg_query(), PDO pgsql and pg_send_query() with pg_get_result(),
// two requests at once in one worker, and two queries at once in one request through async(),
// each in a query that returns once all have started (barrier()).
func TestPostgresUnderConcurrency(t *testing.T) {
	t.Parallel()
	dsn := postgres(t)
	s, _ := startBlockingClients(t, "60s")
	arrived := 0 // the barrier's sequence counts every case's callers
	for _, c := range []struct {
		path  string
		calls int // queries in one request
	}{
		{"/pg", 1},
		{"/pdo", 1},
		{"/pg-send", 1},
		{"/pg-two", 2},
	} {
		arrived += 2 * c.calls
		t.Run(c.path, func(t *testing.T) {
			q := url.Values{"dsn": {dsn}, "n": {strconv.Itoa(arrived)}}
			want := strings.TrimSpace(strings.Repeat("met ", c.calls))
			for _, b := range twoAtOnce(t, s, c.path+"?"+q.Encode()) {
				if b != want {
					t.Errorf("%s answered %q, want %q", c.path, b, want)
				}
			}
		})
	}
}

// TestBlockingClientsCancelledAtExecTimeout: a request waiting in curl or libpq past
// exec_timeout gets 504; its fiber is cancelled where it waits (the call fails, its finally
// runs) and the worker goes on serving: the poll() hook does not leave the call spinning or
// blocked.
func TestBlockingClientsCancelledAtExecTimeout(t *testing.T) {
	t.Parallel()
	end := startBarrier(t)
	for _, c := range []struct {
		name, path string
		query      func(t *testing.T) url.Values
	}{
		{"curl_exec", "/curl", func(*testing.T) url.Values { return url.Values{"url": {barrierURL(end, "cancel curl_exec", 99)}} }},
		{"curl_multi", "/multi", func(*testing.T) url.Values {
			return url.Values{"url": {barrierURL(end, "cancel curl_multi", 99)}, "n": {"2"}}
		}},
		{"pg_query", "/pg", func(t *testing.T) url.Values { return url.Values{"dsn": {postgres(t)}, "n": {"99"}} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			q := c.query(t)
			s, admin := startBlockingClients(t, "1s")
			before, _ := workersInFlight(t, admin)
			if r := get(t, s.URL+c.path+"?"+q.Encode()); r.Status != 504 {
				t.Fatalf("%s past exec_timeout: %d %s, want 504", c.path, r.Status, r.Body)
			}
			s.log.waitFor(t, "finally ran: "+c.path, 10*time.Second)
			if r := get(t, s.URL+"/none"); r.Status != 200 {
				t.Fatalf("after the cancelled request: %d %s", r.Status, r.Body)
			}
			if after, _ := workersInFlight(t, admin); after[0] != before[0] {
				t.Fatalf("the worker was replaced (%d -> %d): the cancelled call did not return", before[0], after[0])
			}
		})
	}
}
