package worker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peregrinephp/peregrine/internal/protocol"
)

// outcomes spells the calls' outcomes, one letter each: A answered, U unread, F failed.
func outcomes(cs []*Call) string {
	var b strings.Builder
	for _, c := range cs {
		b.WriteByte("AUF"[map[Outcome]int{Answered: 0, Unread: 1, Failed: 2}[c.Outcome]])
	}
	return b.String()
}

// startNative boots bin/peregrine-php (make native) on a script in testdata/workers.
func startNative(t *testing.T, script string, env ...string) *Worker {
	t.Helper()
	native, _ := filepath.Abs(filepath.Join("..", "..", "bin", NativeProgram))
	if _, err := os.Stat(native); err != nil {
		t.Skipf("the native runtime is not built (make native): %v", err)
	}
	path, _ := filepath.Abs(filepath.Join("..", "..", "testdata", "workers", script))
	return started(t, Options{Argv: []string{native, path},
		Env: append(append(os.Environ(), "PEREGRINE_PROTOCOL=3"), env...), BootTimeout: 30 * time.Second})
}

// nativeCalls builds calls for targets like "/finish?ms=100"; a target after "PUT " gets a body
// of bodySize bytes.
func nativeCalls(t *testing.T, bodySize int, targets ...string) ([]*Call, []*collected) {
	t.Helper()
	var cs []*Call
	var as []*collected
	for _, target := range targets {
		method := "GET"
		if m, rest, ok := strings.Cut(target, " "); ok {
			method, target = m, rest
		}
		path, query, _ := strings.Cut(target, "?")
		r := &protocol.Request{Method: method, URI: target, Path: path, Query: query, Protocol: "HTTP/1.1",
			Headers: []protocol.Field{{Name: "Host", Value: "test"}}}
		if method == "PUT" {
			r.Body = []byte(strings.Repeat("b", bodySize))
			r.Headers = append(r.Headers, protocol.Field{Name: "Content-Type", Value: "application/octet-stream"})
		}
		frame, err := protocol.AppendRequest(nil, 0, r)
		if err != nil {
			t.Fatal(err)
		}
		a := &collected{}
		cs = append(cs, &Call{Frame: frame, Answer: a})
		as = append(as, a)
	}
	return cs, as
}

// TestExecOutcomes has a row for each thing the worker can say, or fail to say, about the
// requests of a batch (the table in Outcome's doc): the pool reads outcomes, never infers them.
func TestExecOutcomes(t *testing.T) {
	tests := []struct {
		name     string
		script   string
		env      []string
		body     int // size of a PUT's body
		targets  []string
		timeout  time.Duration
		outcomes string
		statuses []int // of the answered calls, in order
		fate     error // nil: the worker serves on
	}{
		{"every request answered", "exchange.php", nil, 0, []string{"/pid", "/status?code=404", "/pid"}, time.Minute, "AAA", []int{200, 404, 200}, nil},
		{"a fatal error answers 500; the requests behind it are unread", "exchange.php", nil, 0,
			[]string{"/pid", "/fatal", "/pid", "/pid"}, time.Minute, "AAUU", []int{200, 500}, ErrExiting},
		{"a fatal error with its body unread, larger than the pipe", "exchange.php", nil, 3 * PipeBuffer,
			[]string{"PUT /fatal"}, time.Minute, "A", []int{500}, ErrExiting},
		{"a body around the pipe's size, unread by a fatal request", "exchange.php", nil, PipeBuffer - 20,
			[]string{"PUT /fatal"}, time.Minute, "A", []int{500}, ErrExiting},
		{"a script that leaves its loop: the rest of the batch is unread", "exchange-loop.php", []string{"LOOP_REQUESTS=2"}, 0,
			[]string{"/a", "/b", "/c", "/d"}, time.Minute, "AAUU", []int{200, 200}, ErrExiting},
		{"the work after fastcgi_finish_request() holds the worker", "exchange.php", nil, 0,
			[]string{"/finish?ms=50", "/pid"}, time.Minute, "AA", []int{200, 200}, nil},
		{"killed past exec_timeout after its answer: the answer stands", "exchange.php", nil, 0,
			[]string{"/finish?ms=60000", "/pid"}, 300 * time.Millisecond, "AU", []int{200}, ErrExecTimeout},
		{"killed past exec_timeout before its answer", "exchange.php", nil, 0,
			[]string{"/pid", "/hang", "/pid"}, 300 * time.Millisecond, "AFU", []int{200}, ErrExecTimeout},
		{"an out-of-range status is a 502, the worker stays", "exchange.php", nil, 0,
			[]string{"/status?code=1000", "/pid"}, time.Minute, "AA", []int{502, 200}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := startNative(t, tt.script, tt.env...)
			cs, as := nativeCalls(t, tt.body, tt.targets...)
			done, err := seq(w).Exec(context.Background(), cs, tt.timeout, -1, nil)
			if !done {
				t.Fatal("Exec returned early without a lead call")
			}
			if got := outcomes(cs); got != tt.outcomes {
				t.Fatalf("outcomes %s, want %s (fate %v)", got, tt.outcomes, err)
			}
			if (tt.fate == nil) != (err == nil) || tt.fate != nil && !errors.Is(err, tt.fate) {
				t.Fatalf("fate %v, want %v", err, tt.fate)
			}
			var statuses []int
			for i, c := range cs {
				if c.Outcome == Answered {
					statuses = append(statuses, as[i].status)
				}
				if c.Outcome == Unread && len(as[i].frames) > 0 {
					t.Errorf("call %d is unread but got frames %v", i, as[i].frames)
				}
			}
			if !equalInts(statuses, tt.statuses) {
				t.Fatalf("statuses %v, want %v", statuses, tt.statuses)
			}
			if tt.fate == nil {
				// The worker serves on, and nothing it wrote is left over.
				more, as := nativeCalls(t, 0, "/pid")
				if _, err := seq(w).Exec(context.Background(), more, time.Minute, -1, nil); err != nil || as[0].status != 200 {
					t.Fatalf("the next request: %v, %+v", err, as[0])
				}
			}
		})
	}
}

// TestExecLeavesEarlyAfterTheLeadsAnswer: the lead call's client gets its answer while PHP still
// works after it (fastcgi_finish_request()); Finish sees the rest through.
func TestExecLeavesEarlyAfterTheLeadsAnswer(t *testing.T) {
	w := startNative(t, "exchange.php")
	cs, as := nativeCalls(t, 0, "/finish?ms=300", "/pid")
	done, err := seq(w).Exec(context.Background(), cs, time.Minute, 0, nil)
	if done || err != nil {
		t.Fatalf("done %v, err %v: want an early return", done, err)
	}
	if outcomes(cs) != "AU" || as[0].status != 200 || string(as[0].body) != "answered" {
		t.Fatalf("at the early return: outcomes %s, answer %+v", outcomes(cs), as[0])
	}
	if err := seq(w).Finish(nil); err != nil || outcomes(cs) != "AA" || as[1].status != 200 {
		t.Fatalf("Finish: %v, outcomes %s, %+v", err, outcomes(cs), as[1])
	}
}

// TestExecSeesAnExitAnnouncedBetweenBatches: a worker that said it exits after its last batch
// (DONE with LAST arrives late) gets no request: the next batch is unread.
func TestExecSeesAnExitAnnouncedBetweenBatches(t *testing.T) {
	w := startNative(t, "exchange-loop.php")
	cs, _ := nativeCalls(t, 0, "/a")
	if _, err := seq(w).Exec(context.Background(), cs, time.Minute, -1, nil); err != nil {
		t.Fatal(err)
	}
	<-w.Exited() // its DONE with LAST is in the pipe by now
	cs, _ = nativeCalls(t, 0, "/b", "/c")
	if _, err := seq(w).Exec(context.Background(), cs, time.Minute, -1, nil); !errors.Is(err, ErrExiting) || outcomes(cs) != "UU" {
		t.Fatalf("err %v, outcomes %s", err, outcomes(cs))
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestExecHoldsARequestsBytesUntilItEnded: the answer of a request whose script reads its body
// after answering (fastcgi_finish_request()) is complete long before the body is written; Exec
// returns early, and the call's bytes must stay untouched until Finish has seen the request end.
// Bodies around the pipe's size and past it, in the frame and beside it (Body).
func TestExecHoldsARequestsBytesUntilItEnded(t *testing.T) {
	w := startNative(t, "exchange.php")
	dir := t.TempDir()
	for i, size := range []int{PipeBuffer - 1, PipeBuffer, PipeBuffer + 1, 2 * PipeBuffer, 1 << 20} {
		for _, beside := range []bool{false, true} {
			out := filepath.Join(dir, fmt.Sprintf("%d-%v", i, beside))
			body := bytes.Repeat([]byte{byte('a' + i)}, size)
			r := &protocol.Request{Method: "PUT", URI: "/finish-hash?ms=20&out=" + out, Path: "/finish-hash", Query: "ms=20&out=" + out,
				Protocol: "HTTP/1.1", Headers: []protocol.Field{{Name: "Host", Value: "test"}}}
			var frame []byte
			var err error
			c := &Call{Answer: &collected{}}
			if beside {
				frame, err = protocol.AppendRequestHead(nil, 0, r, int64(size))
				c.Body = bytes.NewReader(body)
			} else {
				r.Body = body
				frame, err = protocol.AppendRequest(nil, 0, r)
			}
			if err != nil {
				t.Fatal(err)
			}
			c.Frame = frame
			var released countReleases
			c.Owner = &released
			c.Hold() // the caller's, as the pool's
			done, err := seq(w).Exec(context.Background(), []*Call{c}, time.Minute, 0, nil)
			c.Drop()
			if err != nil {
				t.Fatalf("%d bytes: %v", size, err)
			}
			if !done { // the usual case: the answer came 20 ms before the request's end
				if n := released.n.Load(); n != 0 {
					t.Fatalf("%d bytes: released %d times before the request ended", size, n)
				}
				if err := seq(w).Finish(nil); err != nil {
					t.Fatal(err)
				}
			}
			if n := released.n.Load(); n != 1 {
				t.Fatalf("%d bytes: released %d times once the request ended, want 1", size, n)
			}
			sum := sha256.Sum256(body)
			if got, _ := os.ReadFile(out); string(got) != fmt.Sprintf("%d %x", size, sum) {
				t.Fatalf("%d bytes: the script read %q", size, got)
			}
		}
	}
}

// exchanges holds the Exchange of each worker the tests run at concurrency 1 (seq).
var exchanges sync.Map

// seq is w's Exchange at concurrency 1, made on first use.
func seq(w *Worker) *Exchange {
	if x, ok := exchanges.Load(w); ok {
		return x.(*Exchange)
	}
	x, _ := exchanges.LoadOrStore(w, NewExchange(context.Background(), w, 1, 0, nil))
	return x.(*Exchange)
}
