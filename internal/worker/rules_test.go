package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/peregrinephp/peregrine/internal/protocol"
)

// TestOutcomeRule: the rule the exchange applies at every concurrency, row by row (docs/protocol.md).
func TestOutcomeRule(t *testing.T) {
	tests := []struct {
		id       uint32
		answered bool
		lastRead uint32
		want     Outcome
	}{
		{5, true, 3, Answered}, // an answer stands, whatever the worker read after
		{5, true, allRead, Answered},
		{4, false, 3, Unread}, // written after the last word: PHP never saw it
		{3, false, 3, Failed}, // read: PHP may have begun it
		{1, false, 3, Failed},
		{1, false, 0, Unread}, // the last word names no request read
		{7, false, allRead, Failed},
	}
	for _, tt := range tests {
		if got := outcome(tt.id, tt.answered, tt.lastRead); got != tt.want {
			t.Errorf("outcome(%d, %v, %d) = %d, want %d", tt.id, tt.answered, tt.lastRead, got, tt.want)
		}
	}
	last := func(id uint32, payload []byte, sequential bool) (uint32, error) {
		return lastRead(protocol.Header{Type: protocol.TypeDone, Flags: protocol.FlagLast, ID: id, Length: uint32(len(payload))}, payload, sequential)
	}
	for _, tt := range []struct {
		id         uint32
		payload    []byte
		sequential bool
		want       uint32
		err        error
	}{
		{4, []byte{9, 0, 0, 0}, true, 9, nil}, // the payload says it, in both modes
		{4, []byte{9, 0, 0, 0}, false, 9, nil},
		{4, nil, true, 4, nil},        // one at a time: the last request it ended is the last it read
		{4, nil, false, allRead, nil}, // concurrent, no payload: it cannot tell
		{4, []byte{1, 2}, true, 0, ErrProtocol},
		{4, []byte{1, 2, 3, 4, 5}, false, 0, ErrProtocol},
	} {
		got, err := last(tt.id, tt.payload, tt.sequential)
		if got != tt.want || !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
			t.Errorf("lastRead(%d, %v, sequential %v) = %d, %v; want %d, %v", tt.id, tt.payload, tt.sequential, got, err, tt.want, tt.err)
		}
	}
}

// TestOutcomesAtEachConcurrency runs one table of what a worker says against the exchange at
// concurrency 1 (Exec: the calls as one batch) and above (Do: each call written once the one
// before it is in the pipe). testdata/workers/interleave.php speaks both: it reads what is written, in id order, and
// its last word names the last request it read (it answers out of order, so a batch here has
// its slow request last).
func TestOutcomesAtEachConcurrency(t *testing.T) {
	tests := []struct {
		name     string
		targets  []string
		timeout  time.Duration
		kill     bool    // the worker is killed once the first call is answered
		seq, mux string  // outcomes: A answered, U unread, F failed
		errs     []error // of each call, where one is expected
		fate     error   // of Exec: nil, the worker serves on
	}{
		{"answers, then DONE", []string{"/a", "/b"}, time.Minute, false, "AA", "AA", nil, nil},
		{"an answer, then DONE with LAST naming the last request read: the rest is unread", []string{"/exit", "/b"}, time.Minute, false,
			"AU", "AU", nil, ErrExiting},
		{"DONE with LAST for a request before its answer: a fatal error in it", []string{"/fatal", "/b"}, time.Minute, false,
			"FU", "FU", []error{ErrFatal, nil}, ErrExiting},
		{"DONE with LAST for no request, naming one it read: that one failed, never unread", []string{"/die", "/b"}, time.Minute, false,
			"FU", "FU", []error{ErrExiting, nil}, ErrExiting},
		{"past exec_timeout before its answer: killed at concurrency 1, cancelled above", []string{"/b", "/hang"}, 300 * time.Millisecond, false,
			"AF", "AF", []error{nil, ErrExecTimeout}, ErrExecTimeout},
		{"killed, no last word: what it was written and could have read failed", []string{"/b", "/hang"}, time.Minute, true,
			"AF", "AF", []error{nil, ErrExited}, ErrExited},
	}
	script, _ := filepath.Abs(filepath.Join("..", "..", "testdata", "workers", "interleave.php"))
	start := func(t *testing.T) *Worker {
		return started(t, Options{Argv: []string{"php", script}, Env: append(os.Environ(), "PEREGRINE_PROTOCOL=3"), BootTimeout: 30 * time.Second})
	}
	check := func(t *testing.T, mode string, cs []*Call, want string, errs []error) {
		t.Helper()
		if got := outcomes(cs); got != want {
			t.Fatalf("%s: outcomes %s, want %s (errors %v %v)", mode, got, want, cs[0].Err, cs[len(cs)-1].Err)
		}
		for i, err := range errs {
			if err != nil && !errors.Is(cs[i].Err, err) {
				t.Fatalf("%s: call %d: %v, want %v", mode, i, cs[i].Err, err)
			}
			if errors.Is(cs[i].Err, ErrProtocol) || err != ErrFatal && errors.Is(cs[i].Err, ErrFatal) {
				t.Fatalf("%s: call %d: %v", mode, i, cs[i].Err)
			}
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Run("concurrency 1", func(t *testing.T) {
				w := start(t)
				cs, _ := nativeCalls(t, 0, tt.targets...)
				ctx, kill := context.WithCancel(context.Background())
				defer kill()
				answered := func(i int) {
					if tt.kill && i == 0 {
						kill() // Exec kills the worker on ctx's end
					}
				}
				_, err := seq(w).Exec(ctx, cs, tt.timeout, -1, answered)
				check(t, "Exec", cs, tt.seq, tt.errs)
				if (tt.fate == nil) != (err == nil) || tt.fate != nil && !errors.Is(err, tt.fate) {
					t.Fatalf("fate %v, want %v", err, tt.fate)
				}
			})
			t.Run("concurrent", func(t *testing.T) {
				w := start(t)
				m := NewExchange(context.Background(), w, 64, time.Second, func(error) {})
				cs, _ := nativeCalls(t, 0, tt.targets...)
				var dones []chan struct{}
				for _, c := range cs {
					written := signalWritten(c)
					done := make(chan struct{})
					dones = append(dones, done)
					go func() {
						defer close(done)
						m.Do(context.Background(), c, tt.timeout)
					}()
					select { // in the pipe, or never written: the next comes after it
					case <-written:
					case <-done:
					}
				}
				if tt.kill {
					<-dones[0]
					w.Kill()
				}
				for _, d := range dones {
					<-d
				}
				check(t, "Do", cs, tt.mux, tt.errs)
			})
		})
	}
}

// exchangeOf is an Exchange of a worker that runs no process, with calls in flight under ids
// 1..n, for tests of what the reader makes of frames (take) without PHP: at concurrency 1 a
// batch being run, above 1 requests written one by one.
func exchangeOf(t *testing.T, conc, n int) (*Exchange, []*Call) {
	t.Helper()
	w := &Worker{log: slog.New(slog.DiscardHandler), exited: make(chan struct{})}
	x := NewExchange(context.Background(), w, 1, time.Hour, nil)
	x.conc = conc // no reader goroutine: the test is the reader
	targets := make([]string, n)
	for i := range targets {
		targets[i] = "/" + strconv.Itoa(i+1)
	}
	cs, _ := nativeCalls(t, 0, targets...)
	x.mu.Lock()
	defer x.mu.Unlock()
	if conc == 1 {
		x.run.flights = make([]flight, n)
		x.run.calls = cs
		for i, c := range cs {
			x.run.flights[i] = flight{index: i}
			x.registerLocked(&x.run.flights[i], c)
		}
		return x, cs
	}
	for _, c := range cs {
		x.registerLocked(&flight{notify: make(chan struct{}, 1)}, c)
	}
	return x, cs
}

// frame is one frame from a worker, for take.
type frame struct {
	typ     protocol.Type
	flags   uint16
	id      uint32
	payload []byte
}

func response(t *testing.T) []byte {
	t.Helper()
	b, err := protocol.AppendResponse(nil, 0, &protocol.Response{Status: 200})
	if err != nil {
		t.Fatal(err)
	}
	return b[protocol.HeaderSize:]
}

// TestTakeRules: what the reader makes of each frame, the same at every concurrency but where a
// rule says otherwise (docs/protocol.md, "The exchange"): a frame out of place is a protocol
// violation, whatever the concurrency; at concurrency 1 so is a frame for any request but the
// one whose answer or DONE is awaited.
func TestTakeRules(t *testing.T) {
	const more, last = protocol.FlagMore, protocol.FlagLast
	resp := response(t)
	tests := []struct {
		name   string
		conc   []int // where the rule holds
		frames []frame
		want   error // of the last frame; the others are taken
	}{
		{"an answer, then DONE", []int{1, 8}, []frame{{protocol.TypeResponse, 0, 1, resp}, {protocol.TypeDone, 0, 1, nil}}, nil},
		{"hints, a streamed answer, then DONE", []int{1, 8}, []frame{{protocol.TypeHints, 0, 1, nil}, {protocol.TypeResponse, more, 1, resp},
			{protocol.TypeBody, more, 1, []byte("a")}, {protocol.TypeBody, 0, 1, nil}, {protocol.TypeDone, 0, 1, nil}}, nil},
		{"the second request's answer first", []int{8}, []frame{{protocol.TypeResponse, 0, 2, resp}, {protocol.TypeResponse, 0, 1, resp}}, nil},
		{"the second request's answer before the first's DONE", []int{1}, []frame{{protocol.TypeResponse, 0, 1, resp}, {protocol.TypeResponse, 0, 2, resp}}, ErrProtocol},
		{"BODY before RESPONSE", []int{1, 8}, []frame{{protocol.TypeBody, 0, 1, nil}}, ErrProtocol},
		{"HINTS after RESPONSE", []int{1, 8}, []frame{{protocol.TypeResponse, more, 1, resp}, {protocol.TypeHints, 0, 1, nil}}, ErrProtocol},
		{"a second RESPONSE", []int{1, 8}, []frame{{protocol.TypeResponse, more, 1, resp}, {protocol.TypeResponse, 0, 1, resp}}, ErrProtocol},
		{"a frame after the answer's last", []int{1, 8}, []frame{{protocol.TypeResponse, 0, 1, resp}, {protocol.TypeBody, 0, 1, nil}}, ErrProtocol},
		{"DONE before the answer, without LAST", []int{1, 8}, []frame{{protocol.TypeDone, 0, 1, nil}}, ErrProtocol},
		{"DONE with a payload, without LAST", []int{1, 8}, []frame{{protocol.TypeResponse, 0, 1, resp}, {protocol.TypeDone, 0, 1, []byte{1, 0, 0, 0}}}, ErrProtocol},
		{"DONE with LAST and a payload that is no id", []int{1, 8}, []frame{{protocol.TypeDone, last, 0, []byte{1, 0}}}, ErrProtocol},
		{"a frame for a request not in flight", []int{1, 8}, []frame{{protocol.TypeResponse, 0, 7, resp}}, ErrProtocol},
		{"DONE with LAST for a request not in flight: the last word between requests", []int{1, 8}, []frame{{protocol.TypeDone, last, 0, nil}}, nil},
		{"ERROR", []int{1, 8}, []frame{{protocol.TypeError, 0, 0, []byte("broken")}}, ErrProtocol},
		{"a server's frame from the worker", []int{1, 8}, []frame{{protocol.TypeRequest, 0, 1, nil}}, ErrProtocol},
	}
	for _, tt := range tests {
		for _, conc := range tt.conc {
			t.Run(fmt.Sprintf("%s/concurrency %d", tt.name, conc), func(t *testing.T) {
				x, _ := exchangeOf(t, conc, 2)
				for i, f := range tt.frames {
					err := x.take(protocol.Header{Type: f.typ, Flags: f.flags, ID: f.id, Length: uint32(len(f.payload))}, f.payload)
					if i < len(tt.frames)-1 && err != nil {
						t.Fatalf("frame %d (%s): %v", i, f.typ, err)
					}
					if i == len(tt.frames)-1 && (!errors.Is(err, tt.want) || (tt.want == nil) != (err == nil)) {
						t.Fatalf("frame %d (%s): %v, want %v", i, f.typ, err, tt.want)
					}
				}
			})
		}
	}
}

// TestLastWordRules: what the worker's last word (DONE with LAST) and its death make of the
// requests in flight, at each concurrency (rules.go): unread above the last request read, the
// one it names before its answer fatal, the others failed with the worker.
func TestLastWordRules(t *testing.T) {
	const last = protocol.FlagLast
	resp := response(t)
	tests := []struct {
		name   string
		conc   int
		frames []frame
		dies   bool   // the worker dies after the frames
		want   string // what end makes of requests 1..3, by their flights: A answered, U unread, F failed, X fatal
	}{
		{"at 1, LAST for none, naming none read", 1, []frame{{protocol.TypeDone, last, 0, nil}}, false, "UUU"},
		{"at 1, LAST for none, naming 1 read", 1, []frame{{protocol.TypeDone, last, 0, []byte{1, 0, 0, 0}}}, false, "FUU"},
		{"at 1, an answer, then DONE with LAST", 1, []frame{{protocol.TypeResponse, 0, 1, resp}, {protocol.TypeDone, last, 1, nil}}, false, "AUU"},
		{"at 1, LAST for the request awaited: a fatal error", 1, []frame{{protocol.TypeDone, last, 1, nil}}, false, "XUU"},
		{"at 1, died: the one awaited failed, the rest unread", 1, []frame{{protocol.TypeResponse, 0, 1, resp}, {protocol.TypeDone, 0, 1, nil}}, true, "AFU"},
		{"above 1, LAST for 2 before its answer, naming 2 read", 8, []frame{{protocol.TypeDone, last, 2, []byte{2, 0, 0, 0}}}, true, "FXU"},
		{"above 1, LAST without a payload: every one may have been read", 8, []frame{{protocol.TypeResponse, 0, 3, resp}, {protocol.TypeDone, last, 3, nil}}, true, "FFA"},
		{"above 1, died: every one in flight failed", 8, nil, true, "FFF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, _ := exchangeOf(t, tt.conc, 3)
			flights := make([]*flight, 0, 3)
			for id := uint32(1); id <= 3; id++ {
				flights = append(flights, x.calls[id])
			}
			for i, f := range tt.frames {
				if err := x.take(protocol.Header{Type: f.typ, Flags: f.flags, ID: f.id, Length: uint32(len(f.payload))}, f.payload); err != nil {
					t.Fatalf("frame %d (%s): %v", i, f.typ, err)
				}
			}
			if x.said && tt.conc == 1 || tt.dies {
				x.end(ErrExited)
			}
			var got strings.Builder
			for _, f := range flights {
				switch {
				case !f.ended:
					got.WriteByte('-')
				case f.unread:
					got.WriteByte('U')
				case f.fatal:
					got.WriteByte('X')
				case f.answered:
					got.WriteByte('A')
				default:
					got.WriteByte('F')
				}
			}
			if got.String() != tt.want {
				t.Fatalf("requests 1..3: %s, want %s", got.String(), tt.want)
			}
		})
	}
}
