package integration

import (
	"fmt"
	"testing"
	"time"
)

// PHP-FPM fidelity checks through the real binary (issue 15), in worker mode on both runtimes;
// classic mode's are compared with nginx + PHP-FPM in legacy_test.go.

var fidelityRuntimes = []string{"native", "cli"}

// TestOutOfRangeStatusIs502 sets statuses no answer can carry (1000; 65736, which 16 bits would
// wrap to 200; -1): each is answered 502 with an empty body, a warning names the status, and
// the same worker serves the next request, as nginx answers 502 and FPM keeps its child.
func TestOutOfRangeStatusIs502(t *testing.T) {
	for _, rt := range fidelityRuntimes {
		t.Run(rt, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, "workers:\n  command: php "+fixture(t, "fidelity_globals.php")+"\n  runtime: "+rt+"\n  count: 1\n")
			pid := string(get(t, s.URL+"/").Body)
			for _, code := range []int{1000, 65736, -1, 99} {
				r := get(t, fmt.Sprintf("%s/?code=%d", s.URL, code))
				if r.Status != 502 || len(r.Body) != 0 {
					t.Errorf("http_response_code(%d): %d %q, want 502 and no body", code, r.Status, r.Body)
				}
				s.log.waitFor(t, fmt.Sprintf(`the script set the HTTP status %d, outside 100\.\.999: answering 502`, code), 10*time.Second)
				if again := string(get(t, s.URL+"/").Body); again != pid {
					t.Errorf("after status %d the worker changed: pid %s, was %s", code, again, pid)
				}
			}
			if r := get(t, s.URL+"/?code=999"); r.Status != 999 || string(r.Body) != pid {
				t.Errorf("status 999: %d %q, want 999 and the pid", r.Status, r.Body)
			}
		})
	}
}
