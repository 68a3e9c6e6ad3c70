package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"
)

// TestSIGHUPAppliesWorkerSettings: a reload that changes workers.php_ini puts every worker on
// the new setting, exec'd or forked (the pool takes the new options, the template its next
// process's, then the workers are replaced); one that changes workers.count too starts a new
// pool of that many workers on the new settings (reload_pool_test.go tries it under load).
func TestSIGHUPAppliesWorkerSettings(t *testing.T) {
	t.Parallel()
	for name, mode := range map[string]string{"exec": "runtime: cli", "fork": "runtime: native\n  fork: true"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			config := func(limit string, count int) string {
				return fmt.Sprintf("log:\n  format: json\nworkers:\n  command: php %s\n  %s\n  count: %d\n  php_ini:\n    memory_limit: %s\n",
					fixture(t, "app.php"), mode, count, limit)
			}
			s := startServer(t, config("64M", 1))
			cfgPath := filepath.Join(s.dir, "peregrine.yaml")
			if r := get(t, s.URL+"/ini?name=memory_limit"); string(r.Body) != "'64M'" {
				t.Fatalf("before: %s", r.Body)
			}
			if err := os.WriteFile(cfgPath, []byte("http:\n  address: 127.0.0.1:0\n"+config("96M", 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			s.signal(syscall.SIGHUP)
			s.log.waitFor(t, `all workers replaced`, 30*time.Second)
			if r := get(t, s.URL+"/ini?name=memory_limit"); string(r.Body) != "'96M'" {
				t.Fatalf("after the reload: %s; log:\n%s", r.Body, s.log.String())
			}
			if err := os.WriteFile(cfgPath, []byte("http:\n  address: 127.0.0.1:0\n"+config("128M", 2)), 0o644); err != nil {
				t.Fatal(err)
			}
			s.signal(syscall.SIGHUP)
			s.log.waitFor(t, `all workers replaced[\s\S]*all workers replaced`, 30*time.Second)
			if r := get(t, s.URL+"/ini?name=memory_limit"); string(r.Body) != "'128M'" {
				t.Fatalf("after a reload to 2 workers: %s; log:\n%s", r.Body, s.log.String())
			}
			if regexp.MustCompile(`need a restart.*workers.count`).MatchString(s.log.String()) {
				t.Errorf("workers.count was not applied:\n%s", s.log.String())
			}
		})
	}
}
