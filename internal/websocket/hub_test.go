package websocket

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/peregrinephp/peregrine/internal/protocol"
)

func TestHistoryBounds(t *testing.T) {
	var hi history
	now := time.Now()
	for i := range HistoryMessages + 100 {
		hi.add("c", []byte{byte(i)}, now)
	}
	if n := len(hi.since(0, now)); n != HistoryMessages {
		t.Errorf("%d entries kept, want %d", n, HistoryMessages)
	}
	if got := hi.since(uint64(HistoryMessages+99), now); len(got) != 1 || got[0].seq != HistoryMessages+100 {
		t.Errorf("since the next to last: %+v", got)
	}
	big := make([]byte, HistoryBytes/2+1)
	hi.add("c", big, now)
	hi.add("c", big, now)
	if hi.bytes > HistoryBytes {
		t.Errorf("%d bytes kept, at most %d", hi.bytes, HistoryBytes)
	}
	if got := hi.since(0, now.Add(HistoryAge+time.Second)); len(got) != 0 {
		t.Errorf("%d entries older than %s resumed", len(got), HistoryAge)
	}
}

// TestOriginAllowed: the request's own host (host: a trusted proxy's X-Forwarded-Host when the
// front resolved one, else Host) and allowed_origins pass; nothing else does, the Host header
// behind a proxy included (a browser's page came from the public host, not the proxied one).
func TestOriginAllowed(t *testing.T) {
	h := &Hub{opts: Options{AllowedOrigins: []string{"https://app.example", "cdn.example"}}}
	for _, tc := range []struct {
		origin, host string
		want         bool
	}{
		{"", "server.example:8080", true},
		{"http://server.example:8080", "server.example:8080", true}, // the request's own host
		{"https://app.example", "server.example:8080", true},
		{"http://app.example", "server.example:8080", false}, // a full origin names its scheme
		{"https://cdn.example", "server.example:8080", true},
		{"https://evil.example", "server.example:8080", false},
		{"https://server.example:8080.evil.example", "server.example:8080", false},
		{"null", "server.example:8080", false},
		{"::", "server.example:8080", false},
		// Through a trusted proxy: the forwarded host, not the Host header the proxy sent.
		{"https://public.example", "public.example", true},
		{"http://server.example:8080", "public.example", false},
		{"https://evil.example", "public.example", false},
	} {
		r := httptest.NewRequest("GET", "http://server.example:8080/ws", nil)
		if tc.origin != "" {
			r.Header.Set("Origin", tc.origin)
		}
		if got := h.originAllowed(r, tc.host); got != tc.want {
			t.Errorf("Origin %q, host %q: %t, want %t", tc.origin, tc.host, got, tc.want)
		}
	}
	any := &Hub{opts: Options{AllowedOrigins: []string{"*"}}}
	r := httptest.NewRequest("GET", "http://server.example/ws", nil)
	r.Header.Set("Origin", "https://"+strings.Repeat("x", 10)+".example")
	if !any.originAllowed(r, r.Host) {
		t.Error(`"*" refused an origin`)
	}
}

// TestConnectionCap: WebSockets and event streams share websocket.max_connections, however
// many arrive at once; a subscription past it gets 503 with Retry-After, and a place freed
// by a connection that left is taken again.
func TestConnectionCap(t *testing.T) {
	for _, limit := range []int{1, 3, 64} {
		h, err := New(t.Context(), nil, Options{MaxConnections: limit})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close(context.Background()) })
		var added atomic.Int64
		var wg sync.WaitGroup
		for range 2*limit + 8 {
			wg.Go(func() {
				if h.add(&conn{h: h, id: h.newID()}) == nil {
					added.Add(1)
				}
			})
		}
		wg.Wait()
		if added.Load() != int64(limit) || h.Count() != limit {
			t.Fatalf("cap %d: %d added, %d held", limit, added.Load(), h.Count())
		}

		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/events", nil)
		if !h.EventStream(w, r, http.StatusOK, []protocol.Field{{Name: streamHeader, Value: "c"}}) {
			t.Fatal("a subscription at the cap was left to the caller")
		}
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
			t.Errorf("cap %d: a subscription at the cap got %d %q", limit, w.Code, w.Body.String())
		}
		if h.Count() != limit {
			t.Errorf("cap %d: %d held after a refused subscription", limit, h.Count())
		}

		// One leaves: a subscription takes its place and holds it while it streams.
		for _, c := range h.conns {
			h.remove(c)
			break
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		sw := httptest.NewRecorder()
		go func() {
			defer close(done)
			h.EventStream(sw, httptest.NewRequestWithContext(ctx, "GET", "/events", nil), http.StatusOK,
				[]protocol.Field{{Name: streamHeader, Value: "c"}})
		}()
		deadline := time.Now().Add(10 * time.Second)
		for h.Count() != limit && time.Now().Before(deadline) {
			runtime.Gosched()
		}
		if err := h.add(&conn{h: h, id: h.newID()}); !errors.Is(err, errFull) {
			t.Errorf("cap %d: with a subscriber in the freed place, add: %v, want errFull", limit, err)
		}
		cancel()
		<-done
		if h.Count() != limit-1 {
			t.Errorf("cap %d: %d held after the subscriber left, want %d", limit, h.Count(), limit-1)
		}
	}
}

func TestSendableCode(t *testing.T) {
	for code, want := range map[int]bool{999: false, 1000: true, 1003: true, 1004: false, 1005: false, 1006: false,
		1007: true, 1011: true, 1012: false, 1015: false, 2999: false, 3000: true, 4999: true, 5000: false} {
		if got := SendableCode(code); got != want {
			t.Errorf("SendableCode(%d) = %t, want %t", code, got, want)
		}
	}
}
