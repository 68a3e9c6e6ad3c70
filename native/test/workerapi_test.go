package nativetest

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestWorkerAPI runs examples/hello/worker.php, written for Peregrine\Worker, unchanged on the
// native runtime. It needs Worker::create() to delegate to Internal\NativeServer when
// peregrine_handle_request() exists; until Worker.php does, it is skipped.
func TestWorkerAPI(t *testing.T) {
	p := startNoReady(t, runtime, filepath.Join(root, "examples", "hello", "worker.php"))
	f := p.readFrameOrEOF(t)
	if f == nil {
		p.waitExit(t)
		if strings.Contains(p.log.String(), "php://fd") || strings.Contains(p.log.String(), "fd 3 and fd 4") ||
			strings.Contains(p.log.String(), "STDERR") {
			t.Skipf("php/src/Worker.php does not delegate to the native runtime yet:\n%s", p.log)
		}
		t.Fatalf("the hello worker exited before READY:\n%s", p.log)
	}
	if f.Type != typeReady {
		t.Fatalf("first frame type %d, want READY", f.Type)
	}
	for i := 1; i <= 2; i++ {
		a := p.do(t, request{URI: "/"})
		wantStatus(t, a, 200)
		wantBody(t, a, "Hello, world!")
		wantHeader(t, a, "X-Served", strconv.Itoa(i))
	}
}
