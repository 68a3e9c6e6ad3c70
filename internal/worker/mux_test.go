package worker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a log destination safe for the worker's goroutines and the test's.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// writtenSignal is an empty request body that closes c when it is read: Mux.Do has written the
// REQUEST frame before it.
type writtenSignal chan struct{}

func (c writtenSignal) Read([]byte) (int, error) {
	close(c)
	return 0, io.EOF
}

// TestMuxFatalErrorNamesItsRequest: a concurrent worker (testdata/workers/interleave.php) says
// DONE with LAST for a request before its answer, as the PHP library does when a fatal error
// stops that request's fiber: that request fails with ErrFatal and the log names it; the others
// in flight fail with the process, as the worker's exit, not as a protocol violation.
func TestMuxFatalErrorNamesItsRequest(t *testing.T) {
	var log lockedBuffer
	script, _ := filepath.Abs(filepath.Join("..", "..", "testdata", "workers", "interleave.php"))
	w := started(t, Options{Argv: []string{"php", script}, Env: append(os.Environ(), "PEREGRINE_PROTOCOL=3"),
		BootTimeout: 30 * time.Second, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	m := NewMux(context.Background(), w, time.Second, func(error) {})
	sleeping, _ := nativeCalls(t, 0, "/sleep?ms=60000", "/sleep?ms=60000", "/sleep?ms=60000")
	var wg sync.WaitGroup
	for _, c := range sleeping {
		written := make(chan struct{})
		c.Body = writtenSignal(written) // read once the REQUEST frame is in the pipe
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.Do(context.Background(), c, 0)
		}()
		<-written
	}

	fatal, _ := nativeCalls(t, 0, "/fatal")
	m.Do(context.Background(), fatal[0], 0)
	if fatal[0].Outcome != Failed || !errors.Is(fatal[0].Err, ErrFatal) {
		t.Fatalf("the request that hit the fatal error: %v %v, want it failed with ErrFatal", fatal[0].Outcome, fatal[0].Err)
	}
	wg.Wait()
	for i, c := range sleeping {
		if c.Outcome != Failed || errors.Is(c.Err, ErrFatal) || errors.Is(c.Err, ErrProtocol) || !errors.Is(c.Err, ErrExiting) {
			t.Errorf("request %d in flight beside it: %v %v, want it failed with the worker's exit", i, c.Outcome, c.Err)
		}
	}
	<-m.Dead()
	line := ""
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "fatal error") {
			line = l
		}
	}
	if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "path=/fatal") || !strings.Contains(line, "method=GET") ||
		!strings.Contains(line, "request=4") || !strings.Contains(line, "pid=") {
		t.Fatalf("no error line naming the request; log:\n%s", log.String())
	}
}

// TestMuxRequestsAfterTheLastWordGoElsewhere: a worker that exits by itself names, in its last
// word, the last request it took; a request written after that one (it crossed the last word in
// the pipes) ends unread, for another worker, never failed. Without the last read id in the
// last word the request failed whenever its write came before the reader saw the last word.
func TestMuxRequestsAfterTheLastWordGoElsewhere(t *testing.T) {
	script, _ := filepath.Abs(filepath.Join("..", "..", "testdata", "workers", "interleave.php"))
	for i := range 10 {
		w := started(t, Options{Argv: []string{"php", script}, Env: append(os.Environ(), "PEREGRINE_PROTOCOL=3"), BootTimeout: 30 * time.Second})
		m := NewMux(context.Background(), w, time.Second, func(error) {})
		calls, _ := nativeCalls(t, 0, "/exit", "/sleep?ms=1")
		written := make(chan struct{})
		calls[0].Body = writtenSignal(written)
		done := make(chan struct{})
		go func() {
			defer close(done)
			m.Do(context.Background(), calls[0], 0)
		}()
		<-written // /exit is in the pipe: the next request comes after it
		m.Do(context.Background(), calls[1], 0)
		<-done
		if calls[0].Outcome != Answered {
			t.Fatalf("run %d: /exit: %v %v", i, calls[0].Outcome, calls[0].Err)
		}
		if calls[1].Outcome != Unread {
			t.Fatalf("run %d: the request after the last word: %v %v, want unread", i, calls[1].Outcome, calls[1].Err)
		}
		<-m.Dead()
	}
}

// TestMuxOutlivesTheBootTimeout: the deadline of the wait for READY does not carry over to the
// reader, which once failed (and killed the worker, with every request in flight)
// boot_timeout after the start.
func TestMuxOutlivesTheBootTimeout(t *testing.T) {
	script, _ := filepath.Abs(filepath.Join("..", "..", "testdata", "workers", "interleave.php"))
	// Long enough for PHP to boot on a loaded machine (500 ms failed under the race detector
	// with other tests running): the request then sleeps past it.
	const boot = 2 * time.Second
	w := started(t, Options{Argv: []string{"php", script}, Env: append(os.Environ(), "PEREGRINE_PROTOCOL=3"), BootTimeout: boot})
	m := NewMux(context.Background(), w, time.Second, func(error) {})
	calls, _ := nativeCalls(t, 0, "/sleep?ms="+strconv.Itoa(int((boot+500*time.Millisecond)/time.Millisecond)))
	m.Do(context.Background(), calls[0], 0) // its answer comes after the boot timeout has passed
	if calls[0].Outcome != Answered {
		t.Fatalf("a request answered past boot_timeout: %v %v", calls[0].Outcome, calls[0].Err)
	}
	select {
	case <-m.Dead():
		t.Fatal("the worker died")
	default:
	}
}
