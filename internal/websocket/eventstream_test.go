package websocket

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peregrinephp/peregrine/internal/protocol"
)

// gatedHistory is a broker with a history whose Since waits until the test releases it, as
// a broker that is restarting or partitioned may (past the hub's own bound).
type gatedHistory struct {
	called  chan struct{} // Since was called
	release chan struct{}
	kept    []Kept
}

func (*gatedHistory) Publish(context.Context, string, *Message) error         { return nil }
func (*gatedHistory) Subscribe(context.Context, string, func(*Message)) error { return nil }
func (*gatedHistory) Close() error                                            { return nil }

// Since does not heed ctx: it returns only when the test says so.
func (g *gatedHistory) Since(context.Context, []string, string) ([]Kept, error) {
	close(g.called)
	<-g.release
	return g.kept, nil
}

// streamRecorder is a ResponseWriter an event stream writes to while the test reads it.
type streamRecorder struct {
	hd    http.Header
	mu    sync.Mutex
	body  bytes.Buffer
	wrote chan struct{}
}

func newStreamRecorder() *streamRecorder {
	return &streamRecorder{hd: http.Header{}, wrote: make(chan struct{}, 1)}
}

func (s *streamRecorder) Header() http.Header { return s.hd }
func (s *streamRecorder) WriteHeader(int)     {}
func (s *streamRecorder) Flush()              {}
func (s *streamRecorder) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case s.wrote <- struct{}{}:
	default:
	}
	return s.body.Write(b)
}

// waitFor waits until the body holds want, or fails at the deadline.
func (s *streamRecorder) waitFor(t *testing.T, want string) string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		s.mu.Lock()
		got := s.body.String()
		s.mu.Unlock()
		if strings.Contains(got, want) {
			return got
		}
		select {
		case <-s.wrote:
		case <-deadline:
			t.Fatalf("the stream never wrote %q; it has %q", want, got)
		}
	}
}

// A resume waiting on the broker's history must not hold the hub: a send, a lookup, a
// delivery go on meanwhile. Then the replay comes first, and a live publish the replay had
// is not sent twice.
func TestResumeDoesNotHoldHub(t *testing.T) {
	g := &gatedHistory{called: make(chan struct{}), release: make(chan struct{}),
		kept: []Kept{{Channel: "c", EventID: "7", Data: []byte("kept")}}}
	h, err := New(t.Context(), nil, Options{Broker: g})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	w := newStreamRecorder()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		h.EventStream(w, httptest.NewRequestWithContext(ctx, "GET", "/e", nil), http.StatusOK,
			[]protocol.Field{{Name: streamHeader, Value: "c"}, {Name: resumeHeader, Value: "6"}})
	}()
	t.Cleanup(func() { cancel(); <-ended })
	<-g.called

	done := make(chan struct{})
	go func() {
		defer close(done)
		h.Count()
		h.sendHere("elsewhere.1", []byte("hi"), false)
		h.deliver("c", []byte("kept"), "7") // heard live after the history kept it
		h.deliver("c", []byte("live"), "8")
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second): // a deadline, not a measure: the history never returns
		close(g.release)
		t.Fatal("the hub waited for a resume's history")
	}
	close(g.release)
	got := w.waitFor(t, "id: 8\n")
	if want := "id: 7\ndata: kept\n\nid: 8\ndata: live\n\n"; got != want {
		t.Fatalf("the stream wrote %q, want %q", got, want)
	}
}

// A replay larger than the send queue sends what fits, then ends the stream, as a live
// publish past the limit does.
func TestResumePastSendQueue(t *testing.T) {
	g := &gatedHistory{called: make(chan struct{}), release: make(chan struct{}), kept: []Kept{
		{Channel: "c", EventID: "1", Data: []byte("0123456789")},
		{Channel: "c", EventID: "2", Data: []byte("0123456789")},
		{Channel: "c", EventID: "3", Data: []byte("0123456789")},
	}}
	close(g.release)
	h, err := New(t.Context(), nil, Options{Broker: g, SendQueue: 25})
	if err != nil {
		t.Fatal(err)
	}
	w := newStreamRecorder()
	h.EventStream(w, httptest.NewRequestWithContext(t.Context(), "GET", "/e", nil), http.StatusOK,
		[]protocol.Field{{Name: streamHeader, Value: "c"}, {Name: resumeHeader, Value: "0"}})
	if got, want := w.waitFor(t, "id: 2\n"), "id: 1\ndata: 0123456789\n\nid: 2\ndata: 0123456789\n\n"; got != want {
		t.Fatalf("the stream wrote %q, want %q", got, want)
	}
}
