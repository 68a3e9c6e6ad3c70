package httpserver

import (
	"bytes"
	"io"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/peregrinephp/peregrine/internal/protocol"
)

// oneByteReader returns its bytes one a Read, as a body in one-byte chunks can arrive.
type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(p []byte) (int, error) { return o.r.Read(p[:min(len(p), 1)]) }

// writeCalls returns the write system calls this process made so far (/proc/self/io syscw).
func writeCalls(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skipf("no /proc/self/io: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Skip("no syscw in /proc/self/io")
	return 0
}

// TestSpilledBodyInTinyReadsCostsFewWrites (issue 25 item 12): a 1 MiB body that arrives a
// byte a read goes to its temporary file in writes of 64 KiB, not one a read.
func TestSpilledBodyInTinyReadsCostsFewWrites(t *testing.T) {
	const size = 1 << 20
	h := NewHandler(frameRunner{{protocol.TypeResponse, 0, responsePayload(t, 200, "ok")}}, Options{TempDir: t.TempDir()})
	req := httptest.NewRequest("POST", "/", io.NopCloser(oneByteReader{bytes.NewReader(make([]byte, size))}))
	req.ContentLength = -1
	before := writeCalls(t)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	writes := writeCalls(t) - before
	if rec.Code != 200 {
		t.Fatalf("%d %q", rec.Code, rec.Body)
	}
	// (size-memoryBody)/64 KiB = 14 writes; a few more for whatever else the process does.
	if writes > 1000 {
		t.Fatalf("%d write system calls for a %d-byte body read a byte at a time", writes, size)
	}
	t.Logf("%d write system calls", writes)
}
