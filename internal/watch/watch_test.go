package watch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestGlobRegexp(t *testing.T) {
	tests := []struct {
		glob, path string
		want       bool
	}{
		{"/a/*.php", "/a/x.php", true},
		{"/a/*.php", "/a/b/x.php", false},
		{"/a/**/*.php", "/a/x.php", true},
		{"/a/**/*.php", "/a/b/c/x.php", true},
		{"/a/**/*.php", "/a/b/x.txt", false},
		{"/a/?.yaml", "/a/c.yaml", true},
		{"/a/[xy].php", "/a/y.php", true},
		{"/a/[xy].php", "/a/z.php", false},
		{"/a/file.php", "/a/fileXphp", false},
	}
	for _, tt := range tests {
		re, err := globRegexp(tt.glob)
		if err != nil {
			t.Fatal(err)
		}
		if got := re.MatchString(tt.path); got != tt.want {
			t.Errorf("%s ~ %s = %v, want %v", tt.glob, tt.path, got, tt.want)
		}
	}
}

// burstQuiet is the quiet period of the tests that expect one change for a burst: a burst's
// writes must never be that far apart, even on a loaded machine, or the burst is two.
const burstQuiet = time.Second

func start(t *testing.T, dir string, quiet time.Duration, entries ...string) <-chan Change {
	t.Helper()
	w, err := New(dir, entries, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return w.Run(ctx)
}

// expectOne returns the one change reported for a burst of a watcher started with burstQuiet,
// and fails if a second comes within twice that quiet period after it.
func expectOne(t *testing.T, ch <-chan Change) Change {
	t.Helper()
	var c Change
	select {
	case c = <-ch:
	case <-time.After(20 * time.Second):
		t.Fatal("no change reported")
	}
	select {
	case extra := <-ch:
		t.Fatalf("a second change reported for one burst: %+v", extra)
	case <-time.After(2 * burstQuiet):
	}
	return c
}

func TestBurstIsReportedOnce(t *testing.T) {
	dir := t.TempDir()
	ch := start(t, dir, burstQuiet, ".")
	for i := range 50 {
		if err := os.WriteFile(filepath.Join(dir, "app.php"), []byte(fmt.Sprint(i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := expectOne(t, ch)
	if c.Path != filepath.Join(dir, "app.php") || c.Count < 1 {
		t.Fatalf("change = %+v", c)
	}
}

func TestGlobFiltersAndNewDirectoriesAreWatched(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	ch := start(t, dir, 100*time.Millisecond, "src/**/*.php")
	if err := os.WriteFile(filepath.Join(dir, "src", "notes.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-ch:
		t.Fatalf("a non-matching file triggered %+v", c)
	case <-time.After(400 * time.Millisecond):
	}
	sub := filepath.Join(dir, "src", "deep")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	// The new directory is watched once its create event is handled: write until it is.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := os.WriteFile(filepath.Join(sub, "x.php"), []byte("<?php"), 0o644); err != nil {
			t.Fatal(err)
		}
		select {
		case c := <-ch:
			if c.Path != filepath.Join(sub, "x.php") {
				t.Fatalf("change = %+v", c)
			}
			return
		case <-time.After(300 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("a file in a directory created after the start was never reported")
		}
	}
}

func TestMissingDirectoryIsAnError(t *testing.T) {
	if _, err := New(t.TempDir(), []string{"nope"}, 0); err == nil {
		t.Fatal("watching a missing directory succeeded")
	}
}

// A relative glob under a relative dir (the default workers.dir ".") is rooted in that
// directory, not in "/" (issue 15 item 18: the server walked from / and failed).
func TestRelativeGlobUnderRelativeDir(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	r, err := parseEntry(".", "*.php")
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := filepath.EvalSymlinks(dir); r.root != dir && r.root != want {
		t.Fatalf("root %q, want %q", r.root, dir)
	}
	ch := start(t, ".", burstQuiet, "*.php")
	if err := os.WriteFile(filepath.Join(dir, "index.php"), []byte("<?php\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c := expectOne(t, ch); filepath.Base(c.Path) != "index.php" {
		t.Fatalf("change %+v, want index.php", c)
	}
}
