package httpserver

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/peregrinephp/peregrine/internal/protocol"
)

// discardWriter is a ResponseWriter that keeps nothing, so that a benchmark counts the
// handler's own allocations.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }

// BenchmarkServeHello: the handler's cost per request between the front and the pool, for a
// hello world answered at once by a worker that is not there.
func BenchmarkServeHello(b *testing.B) {
	t := &testing.T{}
	h := NewHandler(frameRunner{{t: protocol.TypeResponse, payload: responsePayload(t, 200, "Hello, world!", "Content-Type", "text/plain")}}, Options{})
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("User-Agent", "bench")
	r.Header.Set("Accept", "*/*")
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
}
