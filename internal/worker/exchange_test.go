package worker

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peregrinephp/peregrine/internal/protocol"
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

// signalWritten gives c a one-byte body that closes the returned channel when it is read:
// Exchange.Do has written the REQUEST frame before it.
func signalWritten(c *Call) <-chan struct{} {
	written := make(writtenSignal)
	binary.LittleEndian.PutUint32(c.Frame[8:], binary.LittleEndian.Uint32(c.Frame[8:])+1)
	c.Body = written
	return written
}

type writtenSignal chan struct{}

func (c writtenSignal) ReadAt(p []byte, off int64) (int, error) {
	close(c)
	p[0] = 'x'
	return 1, io.EOF
}

// TestExchangeFatalErrorNamesItsRequest: a concurrent worker (testdata/workers/interleave.php) says
// DONE with LAST for a request before its answer, as the PHP library does when a fatal error
// stops that request's fiber: that request fails with ErrFatal and the log names it; the others
// in flight fail with the process, as the worker's exit, not as a protocol violation.
func TestExchangeFatalErrorNamesItsRequest(t *testing.T) {
	var log lockedBuffer
	script, _ := filepath.Abs(filepath.Join("..", "..", "testdata", "workers", "interleave.php"))
	w := started(t, Options{Argv: []string{"php", script}, Env: append(os.Environ(), "PEREGRINE_PROTOCOL=3"),
		BootTimeout: 30 * time.Second, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	m := NewExchange(context.Background(), w, 64, time.Second, func(error) {})
	sleeping, _ := nativeCalls(t, 0, "/sleep?ms=60000", "/sleep?ms=60000", "/sleep?ms=60000")
	var wg sync.WaitGroup
	for _, c := range sleeping {
		written := signalWritten(c)
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

// TestExchangeRequestsAfterTheLastWordGoElsewhere: a worker that exits by itself names, in its last
// word, the last request it took; a request written after that one (it crossed the last word in
// the pipes) ends unread, for another worker, never failed. Without the last read id in the
// last word the request failed whenever its write came before the reader saw the last word.
func TestExchangeRequestsAfterTheLastWordGoElsewhere(t *testing.T) {
	script, _ := filepath.Abs(filepath.Join("..", "..", "testdata", "workers", "interleave.php"))
	for i := range 10 {
		w := started(t, Options{Argv: []string{"php", script}, Env: append(os.Environ(), "PEREGRINE_PROTOCOL=3"), BootTimeout: 30 * time.Second})
		m := NewExchange(context.Background(), w, 64, time.Second, func(error) {})
		calls, _ := nativeCalls(t, 0, "/exit", "/sleep?ms=1")
		written := signalWritten(calls[0])
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

// TestExchangeOutlivesTheBootTimeout: the deadline of the wait for READY does not carry over to the
// reader, which once failed (and killed the worker, with every request in flight)
// boot_timeout after the start.
func TestExchangeOutlivesTheBootTimeout(t *testing.T) {
	script, _ := filepath.Abs(filepath.Join("..", "..", "testdata", "workers", "interleave.php"))
	// Long enough for PHP to boot on a loaded machine (500 ms, then 2 s, were tight under the
	// race detector with other tests running): the request then sleeps past it.
	const boot = 5 * time.Second
	w := started(t, Options{Argv: []string{"php", script}, Env: append(os.Environ(), "PEREGRINE_PROTOCOL=3"), BootTimeout: boot})
	m := NewExchange(context.Background(), w, 64, time.Second, func(error) {})
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

// TestExchangeWritesRequestsInIDOrder: requests from many goroutines at once reach the worker in the
// order of their ids (interleave.php answers ERROR to one that does not), as the worker's last
// word relies on. The id used to be taken under one lock and the frame written under another:
// 216 of 3,200 writes came out of order with 32 clients.
func TestExchangeWritesRequestsInIDOrder(t *testing.T) {
	script, _ := filepath.Abs(filepath.Join("..", "..", "testdata", "workers", "interleave.php"))
	w := started(t, Options{Argv: []string{"php", script}, Env: append(os.Environ(), "PEREGRINE_PROTOCOL=3"), BootTimeout: 30 * time.Second})
	m := NewExchange(context.Background(), w, 64, time.Second, func(error) {})
	const clients, each = 32, 25
	var wg sync.WaitGroup
	failed := make(chan error, clients*each)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				calls, _ := nativeCalls(t, 0, "/sleep?ms=1")
				m.Do(context.Background(), calls[0], 0)
				if calls[0].Outcome != Answered {
					failed <- fmt.Errorf("outcome %d: %w", calls[0].Outcome, calls[0].Err)
				}
			}
		}()
	}
	wg.Wait()
	close(failed)
	for err := range failed {
		t.Fatal(err)
	}
}

// stalledAnswer is a client that takes the first frame of its answer, then reads nothing more
// until release is closed.
type stalledAnswer struct{ release chan struct{} }

func (a stalledAnswer) Frame(protocol.Type, uint16, []byte) error {
	<-a.release
	return nil
}

// TestExchangeSlowClientIsCancelledAsSuch: a streamed answer whose client reads nothing while PHP
// sends more than maxQueued is cancelled, and its error says so: it used to pass for
// exec_timeout (a 504, "worker killed" in the log) though no timeout had passed.
func TestExchangeSlowClientIsCancelledAsSuch(t *testing.T) {
	script, _ := filepath.Abs(filepath.Join("..", "..", "testdata", "workers", "interleave.php"))
	w := started(t, Options{Argv: []string{"php", script}, Env: append(os.Environ(), "PEREGRINE_PROTOCOL=3"), BootTimeout: 30 * time.Second})
	m := NewExchange(context.Background(), w, 64, time.Second, func(error) {})
	calls, _ := nativeCalls(t, 0, fmt.Sprintf("/stream?parts=%d&ms=0&pad=%d", 2*maxQueued/(1<<20), 1<<20))
	a := stalledAnswer{release: make(chan struct{})}
	calls[0].Answer = a
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Do(context.Background(), calls[0], 0)
	}()
	// The first frame stalls in the client; the rest fill the queue past maxQueued.
	seen := false
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		m.mu.Lock()
		var stopped error
		for _, mc := range m.calls {
			seen, stopped = true, mc.stopped
		}
		cancelled := seen && (len(m.calls) == 0 || stopped != nil)
		m.mu.Unlock()
		if cancelled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the request was never cancelled")
		}
	}
	close(a.release)
	<-done
	c := calls[0]
	if c.Outcome != Failed || !errors.Is(c.Err, ErrCancelled) || errors.Is(c.Err, ErrExecTimeout) {
		t.Fatalf("outcome %d, err %v: want cancelled for its slow client, not exec_timeout", c.Outcome, c.Err)
	}
	more, as := nativeCalls(t, 0, "/sleep?ms=1&tag=after")
	if m.Do(context.Background(), more[0], 0); more[0].Outcome != Answered || !strings.HasPrefix(string(as[0].body), "after ") {
		t.Fatalf("the worker after: %+v %+v", more[0], as[0])
	}
}

// bigBody is a request body of n bytes that closes started when the writer first reads it.
type bigBody struct {
	n       int64
	started chan struct{}
	once    *sync.Once
}

func (b bigBody) ReadAt(p []byte, off int64) (int, error) {
	b.once.Do(func() { close(b.started) })
	if off >= b.n {
		return 0, io.EOF
	}
	n := copy(p, bytes.Repeat([]byte{'u'}, int(min(int64(len(p)), b.n-off))))
	if off+int64(n) == b.n {
		return n, io.EOF
	}
	return n, nil
}

// TestExchangeCancelGraceDoesNotWaitForAWrite: a request past exec_timeout on a worker that reads
// nothing (a CPU loop holds its process) gets its worker killed a grace after its CANCEL is due,
// even while a large body to the same worker holds the writes (a body is part of its REQUEST
// frame, so CANCEL waits behind it). The grace used to start only once CANCEL was written, so
// the worker stayed, with the body's write and every later request stuck behind it, as long as
// the loop ran (for good with no exec_timeout on the upload).
func TestExchangeCancelGraceDoesNotWaitForAWrite(t *testing.T) {
	script, _ := filepath.Abs(filepath.Join("..", "..", "testdata", "workers", "interleave.php"))
	// Bodies that fit in the pipe with CANCEL, that fill it exactly, and that do not fit.
	for _, size := range []int64{PipeBuffer / 2, PipeBuffer - 2*protocol.HeaderSize - 64, PipeBuffer + 1, 1 << 20} {
		t.Run(strconv.FormatInt(size, 10), func(t *testing.T) {
			w := started(t, Options{Argv: []string{"php", script}, Env: append(os.Environ(), "PEREGRINE_PROTOCOL=3"), BootTimeout: 30 * time.Second})
			m := NewExchange(context.Background(), w, 64, time.Second, func(error) {})
			calls, _ := nativeCalls(t, 0, "/spin?ms=30000", "/upload")
			spin, upload := calls[0], calls[1]
			spinning := signalWritten(spin)
			b := bigBody{n: size, started: make(chan struct{}), once: &sync.Once{}}
			binary.LittleEndian.PutUint32(upload.Frame[8:], binary.LittleEndian.Uint32(upload.Frame[8:])+uint32(b.n))
			upload.Body = b
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				m.Do(context.Background(), spin, 300*time.Millisecond)
			}()
			<-spinning
			go func() {
				defer wg.Done()
				m.Do(context.Background(), upload, 0) // no exec_timeout: nothing but the kill ends its write
			}()
			<-b.started
			select {
			case <-m.Dead():
			case <-time.After(15 * time.Second):
				t.Fatal("the worker was not killed a grace after its cancelled request's exec_timeout")
			}
			wg.Wait()
			if spin.Outcome != Failed || !errors.Is(spin.Err, ErrExecTimeout) {
				t.Errorf("the request past exec_timeout: %v %v", spin.Outcome, spin.Err)
			}
			if upload.Outcome == Answered {
				t.Errorf("the upload to a worker in a CPU loop: answered")
			}
		})
	}
}
