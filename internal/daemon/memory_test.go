package daemon

import (
	"bytes"
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"testing"
	"time"
)

// rssFile is RssFile of this process in KiB: its resident pages of mapped files.
func rssFile(t *testing.T) int64 {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range bytes.Lines(status) {
		if f := bytes.Fields(line); len(f) >= 2 && string(f[0]) == "RssFile:" {
			kb, err := strconv.ParseInt(string(f[1]), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}

// TestReleaseExecutablePages drops the test binary's read-only pages that starting it mapped:
// RssFile falls by at least 1 MiB, and the code goes on running (it maps what it uses again).
func TestReleaseExecutablePages(t *testing.T) {
	before := rssFile(t)
	if err := releaseExecutablePages(); err != nil {
		t.Fatal(err)
	}
	after := rssFile(t)
	t.Logf("RssFile %d KiB before, %d KiB after", before, after)
	if after > before-1024 {
		t.Errorf("RssFile went from %d KiB to %d KiB; want at least 1 MiB less", before, after)
	}
	if got := strconv.Itoa(42); got != "42" { // code and read-only data mapped again
		t.Fatalf("strconv.Itoa(42) = %q after the release", got)
	}
}

// heapResident is the heap's bytes not returned to the system: objects live and dead, free
// pages and the unused parts of spans.
func heapResident() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64() + s[1].Value.Uint64() + s[2].Value.Uint64()
}

// sink keeps the compiler from leaving TestTrimWhenIdle's garbage on the stack.
var sink []byte

// TestTrimWhenIdle leaves 16 MiB of garbage behind with the collector off: within a few periods
// trimWhenIdle has collected it and returned its pages to the system.
func TestTrimWhenIdle(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // only trimWhenIdle collects
	runtime.GC()
	for range 256 {
		sink = make([]byte, 64<<10)
	}
	sink = nil
	if r := heapResident(); r < 16<<20 {
		t.Fatalf("the heap holds %d bytes after 16 MiB of garbage", r)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); trimWhenIdle(ctx, 20*time.Millisecond, 1<<20) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := heapResident()
		if r < 8<<20 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the heap still holds %d bytes 10 s after 16 MiB of garbage; want less than 8 MiB", r)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
