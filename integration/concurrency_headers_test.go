package integration

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestConcurrentPHPHeadersReachTheirOwnClient: 40 clients at once on one native worker of
// concurrency 40 whose handler calls PHP's own header() and setcookie() before and after its
// wait: each client gets its own headers and cookie and none of another's (they used to pile up
// in the process and reach nobody), and the Response's header replaces header()'s of the same
// name.
func TestConcurrentPHPHeadersReachTheirOwnClient(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  runtime: native\n  command: php "+fixture(t, "concurrent_headers.php")+"\n  count: 1\n  concurrency: 40\n")
	atOnce(t, 40, func(i int) string {
		tag := fmt.Sprintf("t%d", i)
		r, err := doErr(context.Background(), "GET", fmt.Sprintf("%s/?tag=%s&ms=%d", s.URL, tag, 10+i%7*5), nil)
		switch {
		case err != nil || r.Status != 200 || string(r.Body) != tag:
			return fmt.Sprintf("%s: %v %d %q", tag, err, r.Status, r.Body)
		case !slices.Equal(r.Header.Values("X-Tag"), []string{tag}) || !slices.Equal(r.Header.Values("X-After"), []string{tag}):
			return fmt.Sprintf("%s: X-Tag %q, X-After %q", tag, r.Header.Values("X-Tag"), r.Header.Values("X-After"))
		case !slices.Equal(r.Header.Values("Set-Cookie"), []string{"tag=" + tag}):
			return fmt.Sprintf("%s: Set-Cookie %q", tag, r.Header.Values("Set-Cookie"))
		case !slices.Equal(r.Header.Values("X-Replaced"), []string{"by the Response"}):
			return fmt.Sprintf("%s: X-Replaced %q", tag, r.Header.Values("X-Replaced"))
		}
		return ""
	})
}

// atOnce runs f(0) ... f(n-1) at once and reports what each returns that is not "".
func atOnce(t *testing.T, n int, f func(i int) string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if e := f(i); e != "" {
				errs <- e
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestConcurrentOutputBuffersAreTheRequests: 40 clients at once on one native worker of
// concurrency 40 whose handler echoes into a buffer of its own around its wait, as a template
// that queries a database does: each gets its own page and none of another's (with the
// process's one stack of buffers, what one request echoed landed in another's buffer). Every
// request starts with no buffer, and the ones a request leaves open, one PHP will not let it
// close included, are ended with it, their contents logged.
func TestConcurrentOutputBuffersAreTheRequests(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  runtime: native\n  command: php "+fixture(t, "concurrent_output.php")+"\n  count: 1\n  concurrency: 40\n")
	const n = 40
	for round := range 2 {
		atOnce(t, n, func(i int) string {
			tag := fmt.Sprintf("r%dt%d", round, i)
			leave := []string{"", "", "removable", "fixed"}[i%4]
			r, err := doErr(context.Background(), "GET", fmt.Sprintf("%s/?tag=%s&ms=%d&leave=%s", s.URL, tag, 10+i%7*5, leave), nil)
			if want := "0 <" + tag + "></" + tag + ">"; err != nil || r.Status != 200 || string(r.Body) != want {
				return fmt.Sprintf("%s: %v %d %q, want %q", tag, err, r.Status, r.Body, want)
			}
			return ""
		})
	}
	for i := 2; i < n; i += 4 {
		s.log.waitFor(t, fmt.Sprintf(`"left r1t%d"`, i+1), 10*time.Second)
		s.log.waitFor(t, fmt.Sprintf(`"left r1t%d"`, i), 10*time.Second)
	}
}
