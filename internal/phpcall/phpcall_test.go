package phpcall

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/peregrinephp/peregrine/internal/jobs"
	"github.com/peregrinephp/peregrine/internal/kv"
)

func listen(t *testing.T) (*Server, *jobs.Memory) {
	t.Helper()
	set := jobs.NewSet()
	mem := jobs.NewMemory()
	set.Add(jobs.New(jobs.Options{Name: "emails", Driver: mem}), "memory")
	store := kv.NewMemory()
	s, err := Listen(t.TempDir(), Options{Jobs: set, Stores: map[string]kv.Store{"default": store}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(); _ = set.Close(); _ = store.Close() })
	return s, mem
}

func dial(t *testing.T, s *Server) net.Conn {
	c, err := net.Dial("unix", s.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func roundTrip(t *testing.T, c net.Conn, req any) Answer {
	t.Helper()
	b, _ := json.Marshal(req)
	if _, err := c.Write(append(binary.LittleEndian.AppendUint32(nil, uint32(len(b))), b...)); err != nil {
		t.Fatal(err)
	}
	return readAnswer(t, c)
}

func readAnswer(t *testing.T, c net.Conn) Answer {
	t.Helper()
	var head [4]byte
	if _, err := io.ReadFull(c, head[:]); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, binary.LittleEndian.Uint32(head[:]))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	var a Answer
	if err := json.Unmarshal(buf, &a); err != nil {
		t.Fatal(err)
	}
	return a
}

func TestSocketIsPrivate(t *testing.T) {
	s, _ := listen(t)
	st, err := os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600", st.Mode().Perm())
	}
	dir := s.dir
	_ = s.Close()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the socket's directory is left after Close: %v", err)
	}
}

func TestCalls(t *testing.T) {
	s, mem := listen(t)
	c := dial(t, s)
	a := roundTrip(t, c, Request{Op: "push", Pipeline: "emails", Payload: `{"to":"a"}`, Headers: map[string]string{"x": "y"}})
	if a.Error != "" || len(a.ID) != 32 {
		t.Fatalf("push: %+v", a)
	}
	if st, _ := mem.Stats(context.Background()); st.Queued != 1 {
		t.Errorf("stats after a push: %+v", st)
	}
	if a := roundTrip(t, c, Request{Op: "push", Pipeline: "emails", Payload: "x", Delay: 60}); a.Error != "" {
		t.Fatalf("delayed push: %+v", a)
	}
	if st, _ := mem.Stats(context.Background()); st.Delayed != 1 {
		t.Errorf("stats after a delayed push: %+v", st)
	}
	if a := roundTrip(t, c, Request{Op: "push", Pipeline: "nope", Payload: "x"}); !strings.Contains(a.Error, `no such pipeline: "nope"`) {
		t.Errorf("push to an unknown pipeline: %+v", a)
	}
	if a := roundTrip(t, c, Request{Op: "push", Pipeline: "emails", Payload: strings.Repeat("x", jobs.MaxPayload+1)}); !strings.Contains(a.Error, "payload or headers too large") {
		t.Errorf("oversized push: %+v", a)
	}
	if a := roundTrip(t, c, Request{Op: "kv.set", Store: "default", Key: "k", Value: `"v"`, TTL: 60}); a.Error != "" {
		t.Fatalf("kv.set: %+v", a)
	}
	if a := roundTrip(t, c, Request{Op: "kv.get", Store: "default", Key: "k"}); !a.Found || a.Value != `"v"` {
		t.Errorf("kv.get: %+v", a)
	}
	if a := roundTrip(t, c, Request{Op: "kv.incr", Store: "default", Key: "n", By: 5}); a.N != 5 {
		t.Errorf("kv.incr: %+v", a)
	}
	if a := roundTrip(t, c, Request{Op: "kv.get", Store: "other", Key: "k"}); !strings.Contains(a.Error, "no such store") {
		t.Errorf("unknown store: %+v", a)
	}
	if a := roundTrip(t, c, Request{Op: "what"}); a.Error == "" {
		t.Errorf("unknown op: %+v", a)
	}
	if a := roundTrip(t, c, "not an object"); !strings.HasPrefix(a.Error, "malformed call") {
		t.Errorf("malformed call: %+v", a)
	}
}

// TestHostileFrames: an oversized length gets an error and the connection ends; a frame cut
// short ends its connection only.
func TestHostileFrames(t *testing.T) {
	s, _ := listen(t)
	c := dial(t, s)
	if _, err := c.Write(binary.LittleEndian.AppendUint32(nil, MaxRequest+1)); err != nil {
		t.Fatal(err)
	}
	if a := readAnswer(t, c); !strings.Contains(a.Error, "at most") {
		t.Errorf("oversized frame: %+v", a)
	}
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the connection after an oversized frame: %v, want EOF", err)
	}
	cut := dial(t, s)
	_, _ = cut.Write([]byte{10, 0, 0, 0, '{'})
	_ = cut.Close()
	// The server still answers others.
	if a := roundTrip(t, dial(t, s), Request{Op: "kv.has", Store: "default", Key: "x"}); a.Error != "" {
		t.Errorf("after a cut frame: %+v", a)
	}
}
