package integration

// The operator's first day (issue 15 items 18-24): what a new operator meets when starting,
// reloading, logging and installing the server.

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A relative watch glob is relative to workers.dir (default: the directory peregrine started
// in); it used to be walked from "/" and stop the server from starting.
func TestWatchRelativeGlob(t *testing.T) {
	t.Parallel()
	s := startServer(t, "workers:\n  command: php "+fixture(t, "app.php")+"\n  count: 1\n  watch: [\"*.php\"]\n")
	first := pidOf(t, s)
	if err := os.WriteFile(filepath.Join(s.dir, "index.php"), []byte("<?php\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.log.waitFor(t, `all workers replaced`, 10*time.Second)
	if pidOf(t, s) == first {
		t.Fatal("worker not replaced after index.php changed")
	}
}
