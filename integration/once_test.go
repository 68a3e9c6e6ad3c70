package integration

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestConcurrentPostsRunAtMostOnce: a concurrent worker dies of one request's fatal error while
// others are in flight, again and again; every request leaves a line in a file of its own as
// PHP begins it. None may have two: a request PHP had read is never run again. Its frames reached
// PHP out of id order (the id was taken under one lock and the frame written under another), so
// the worker's last word ("the last request I read") declared unread a request it had begun,
// and the pool ran that POST again elsewhere.
func TestConcurrentPostsRunAtMostOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t, fmt.Sprintf("workers:\n  runtime: native\n  command: php %s\n  count: 2\n  concurrency: 16\n  exec_timeout: 30s\n", fixture(t, "concurrent.php")))
	dir := t.TempDir()
	const clients, each = 32, 150
	var wg sync.WaitGroup
	var mu sync.Mutex
	answered := map[string]bool{}
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 3))
			for i := range each {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				if rng.IntN(40) == 0 {
					_, _ = doErr(ctx, http.MethodPost, s.URL+"/fatal?ms="+fmt.Sprint(rng.IntN(5)), nil)
					cancel()
					continue
				}
				out := filepath.Join(dir, fmt.Sprintf("%d-%d", c, i))
				r, err := doErr(ctx, http.MethodPost, s.URL+"/count?ms="+fmt.Sprint(rng.IntN(10))+"&out="+out, bytes.NewReader([]byte("x")))
				cancel()
				if err == nil && r.Status == 200 {
					mu.Lock()
					answered[out] = true
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	runs, twice := 0, 0
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		n := bytes.Count(b, []byte("\n"))
		runs += n
		if n > 1 {
			twice++
			t.Errorf("request %s ran %d times, by pids %q", e.Name(), n, bytes.Fields(b))
		}
	}
	for out := range answered {
		if _, err := os.Stat(out); err != nil {
			t.Errorf("request %s was answered 200 but never ran", filepath.Base(out))
		}
	}
	t.Logf("%d requests ran, %d answered 200, %d ran twice; %d workers replaced", runs, len(answered), twice, s.log.count(`worker failed; replacing it`))
}
