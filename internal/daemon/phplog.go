package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"
)

// phpLog is the slog handler the workers' output goes through (worker.Options.Logger; every
// line a worker prints is one record with a "stream" attribute). It makes PHP's output read
// like one server's log rather than N processes' lines:
//   - PHP's fatal and parse errors, and the PHP library's "Uncaught ..." (a 500), are logged at
//     ERROR (the worker logs STDERR at WARN);
//   - an uncaught exception and its stack trace, printed as several lines, become one record;
//   - while the workers boot, a line another worker already printed is not logged again (16
//     workers failing on one syntax error print it once; startError says how many failed);
//   - the request a classic-mode message names at its end (, request: "GET /a.php HTTP/1.1",
//     as nginx's error log says it; native/sapi.c) becomes the record's request attribute.
//
// Records without a "stream" attribute (the worker's own events) pass through unchanged.
type phpLog struct {
	inner  slog.Handler
	shared *phpLogShared
	held   *heldLines // per WithAttrs: one per worker process, which adds its pid
}

type phpLogShared struct {
	mu      sync.Mutex
	booting bool
	seen    map[string]*heldLines // a line printed while booting, and the worker that printed it first
}

// heldLines is an uncaught exception's first line waiting for its stack trace, per stream.
type heldLines struct {
	mu     sync.Mutex
	lines  map[string]*slog.Record
	timers map[string]*time.Timer
}

// traceWait bounds how long an uncaught exception's first line waits for the rest of its trace
// when the trace does not end with PHP's "  thrown in" line.
const traceWait = 100 * time.Millisecond

func newPHPLog(inner slog.Handler) *phpLog {
	return &phpLog{inner: inner, shared: &phpLogShared{booting: true, seen: map[string]*heldLines{}}, held: newHeld()}
}

func newHeld() *heldLines {
	return &heldLines{lines: map[string]*slog.Record{}, timers: map[string]*time.Timer{}}
}

// endBoot stops folding repeated lines: from now on every worker's output is logged.
func (h *phpLog) endBoot() {
	h.shared.mu.Lock()
	h.shared.booting = false
	h.shared.seen = nil
	h.shared.mu.Unlock()
}

var (
	phpRequest = regexp.MustCompile(`, request: "([^"]*)"$`)
	phpFatal   = regexp.MustCompile(`^(PHP )?(Fatal error|Parse error|Catchable fatal error|Recoverable fatal error|Core error|Compile error): |^Uncaught `)
	phpTrace   = regexp.MustCompile(`^(Stack trace:$|#\d+ |  thrown in |Next [\w\\]+: )`)
)

// Enabled lets a record through when its own level or ERROR is enabled: a fatal error arrives
// at WARN and leaves at ERROR; Handle checks the level it leaves with.
func (h *phpLog) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l) || h.inner.Enabled(ctx, slog.LevelError)
}

func (h *phpLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &phpLog{inner: h.inner.WithAttrs(attrs), shared: h.shared, held: newHeld()}
}

func (h *phpLog) WithGroup(name string) slog.Handler {
	return &phpLog{inner: h.inner.WithGroup(name), shared: h.shared, held: newHeld()}
}

func (h *phpLog) Handle(ctx context.Context, r slog.Record) error {
	stream := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "stream" {
			stream = a.Value.String()
			return false
		}
		return true
	})
	if stream == "" {
		return h.emit(ctx, r, false)
	}
	h.held.mu.Lock()
	if held := h.held.lines[stream]; held != nil && phpTrace.MatchString(r.Message) {
		held.Message += "\n" + r.Message
		if !strings.HasPrefix(r.Message, "  thrown in ") {
			h.held.mu.Unlock()
			return nil
		}
		h.held.mu.Unlock()
		return h.flush(stream)
	}
	h.held.mu.Unlock()
	if err := h.flush(stream); err != nil {
		return err
	}
	if phpFatal.MatchString(r.Message) && r.Level < slog.LevelError {
		r = relevel(r, slog.LevelError)
	}
	if strings.Contains(r.Message, "Uncaught ") {
		c := r.Clone()
		h.held.mu.Lock()
		h.held.lines[stream] = &c
		h.held.timers[stream] = time.AfterFunc(traceWait, func() { _ = h.flush(stream) })
		h.held.mu.Unlock()
		return nil
	}
	return h.emit(ctx, r, true)
}

// flush logs the held line of stream, if any.
func (h *phpLog) flush(stream string) error {
	h.held.mu.Lock()
	r := h.held.lines[stream]
	delete(h.held.lines, stream)
	if t := h.held.timers[stream]; t != nil {
		t.Stop()
		delete(h.held.timers, stream)
	}
	h.held.mu.Unlock()
	if r == nil {
		return nil
	}
	return h.emit(context.Background(), *r, true)
}

// emit logs r; output (a line a worker printed) is logged once while the workers boot.
func (h *phpLog) emit(ctx context.Context, r slog.Record, output bool) error {
	if !h.inner.Enabled(ctx, r.Level) {
		return nil
	}
	if m := phpRequest.FindStringSubmatchIndex(r.Message); output && m != nil {
		n := slog.NewRecord(r.Time, r.Level, r.Message[:m[0]], r.PC)
		r.Attrs(func(a slog.Attr) bool { n.AddAttrs(a); return true })
		n.AddAttrs(slog.String("request", r.Message[m[2]:m[3]]))
		r = n
	}
	h.shared.mu.Lock()
	if h.shared.booting && output {
		first, ok := h.shared.seen[r.Message]
		if ok && first != h.held { // another worker said it already
			h.shared.mu.Unlock()
			return nil
		}
		h.shared.seen[r.Message] = h.held
	}
	h.shared.mu.Unlock()
	return h.inner.Handle(ctx, r)
}

func relevel(r slog.Record, l slog.Level) slog.Record {
	n := slog.NewRecord(r.Time, l, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool { n.AddAttrs(a); return true })
	return n
}

// startError is the pool's start error said once per distinct cause: the pool joins one error
// per worker ("start worker N: ..."), and 16 workers failing on one syntax error would repeat
// PHP's message 16 times.
type startError struct {
	errs []error // the pool's, one per failed worker
	msg  string
}

func (e *startError) Error() string   { return e.msg }
func (e *startError) Unwrap() []error { return e.errs }

// summarizeStart folds the pool's joined start error by cause, with the count of workers that
// failed each way; an error that is not a join is returned as it is.
func summarizeStart(err error, size int) error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return err
	}
	errs := j.Unwrap()
	var order []string
	count := map[string]int{}
	for _, e := range errs {
		cause := e
		if inner := errors.Unwrap(e); inner != nil { // drop the pool's "start worker N: "
			cause = inner
		}
		msg := cause.Error()
		if count[msg] == 0 {
			order = append(order, msg)
		}
		count[msg]++
	}
	parts := make([]string, 0, len(order))
	for _, msg := range order {
		parts = append(parts, fmt.Sprintf("%d of %d workers: %s", count[msg], size, msg))
	}
	return &startError{errs: errs, msg: strings.Join(parts, "\n")}
}
