package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestConcurrentWorkerThroughTheServer: one worker with workers.concurrency: 100 holds many
// requests at once through the real server, each answered with its own data (the worker,
// testdata/workers/interleave.php, answers out of order).
func TestConcurrentWorkerThroughTheServer(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	s := startServer(t, "workers:\n  command: php "+fixture(t, "interleave.php")+"\n  count: 1\n  concurrency: 100\nadmin:\n  address: "+addr+"\n")
	const n = 100
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tag := fmt.Sprintf("r%d", i)
			r, err := doErr(context.Background(), "GET", s.URL+"/sleep?ms=3000&tag="+tag, nil)
			if err != nil || r.Status != 200 || !strings.HasPrefix(string(r.Body), tag+" ") {
				errs <- fmt.Sprintf("%s: %v %d %q", tag, err, r.Status, r.Body)
			}
		}()
	}
	eventually(t, 30*time.Second, "every request in flight on the one worker", func() bool {
		var ws []struct {
			InFlight int `json:"in_flight"`
		}
		r := get(t, "http://"+addr+"/workers")
		return json.Unmarshal(r.Body, &ws) == nil && len(ws) == 1 && ws[0].InFlight == n
	})
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestConcurrencyRefusedWhereItCannotRun: classic mode and serveGlobals(), whose request state is
// the process's, refuse workers.concurrency above 1 at start, naming the key.
func TestConcurrencyRefusedWhereItCannotRun(t *testing.T) {
	t.Parallel()
	for name, yaml := range map[string]string{
		"classic mode":   "http:\n  root: " + t.TempDir() + "\nworkers:\n  runtime: native\n  concurrency: 4\n",
		"serveGlobals()": "workers:\n  command: php " + fixture(t, "globals.php") + "\n  count: 1\n  concurrency: 4\n",
	} {
		s := launch(t, yaml)
		if code := s.wait(t, 30*time.Second); code != 1 || !strings.Contains(s.log.String(), "workers.concurrency") {
			t.Errorf("%s with concurrency 4: exit %d, log:\n%s", name, code, s.log.String())
		}
	}
}
