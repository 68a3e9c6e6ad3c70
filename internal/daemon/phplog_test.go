package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func records(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%v: %q", err, line)
		}
		out = append(out, m)
	}
	return out
}

func TestPHPLogFoldsTracesAndRaisesFatals(t *testing.T) {
	var buf bytes.Buffer
	h := newPHPLog(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError}))
	h.endBoot()
	log := slog.New(h).With("pid", 42)
	for _, line := range []string{"PHP Fatal error:  Uncaught Exception: x in /a.php:3", "Stack trace:", "#0 /a.php(5): f()", "#1 {main}", "  thrown in /a.php on line 3"} {
		log.Warn(line, "stream", "stderr")
	}
	log.Warn("PHP Warning:  something", "stream", "stderr") // below the level: dropped
	log.Warn("PHP Parse error:  syntax error", "stream", "stderr")
	recs := records(t, &buf)
	if len(recs) != 2 {
		t.Fatalf("want 2 records, got %d: %s", len(recs), buf.String())
	}
	want := "PHP Fatal error:  Uncaught Exception: x in /a.php:3\nStack trace:\n#0 /a.php(5): f()\n#1 {main}\n  thrown in /a.php on line 3"
	if recs[0]["msg"] != want || recs[0]["level"] != "ERROR" || recs[0]["pid"] != 42.0 {
		t.Errorf("first record %v", recs[0])
	}
	if recs[1]["level"] != "ERROR" || recs[1]["stream"] != "stderr" {
		t.Errorf("second record %v", recs[1])
	}
}

func TestPHPLogSaysBootLinesOnce(t *testing.T) {
	var buf bytes.Buffer
	h := newPHPLog(slog.NewJSONHandler(&buf, nil))
	for pid := range 16 {
		slog.New(h).With("pid", pid).Warn("PHP Parse error:  syntax error in /w.php on line 3", "stream", "stderr")
	}
	one := slog.New(h).With("pid", 100)
	one.Info("loading", "stream", "stdout") // one worker saying a line twice says it twice
	one.Info("loading", "stream", "stdout")
	slog.New(h).Info("worker started") // not worker output: always logged
	slog.New(h).Info("worker started")
	h.endBoot()
	slog.New(h).With("pid", 99).Warn("PHP Parse error:  syntax error in /w.php on line 3", "stream", "stderr")
	if n := strings.Count(buf.String(), "syntax error"); n != 2 {
		t.Errorf("the boot line logged %d times (want once during boot, once after):\n%s", n, buf.String())
	}
	if n := strings.Count(buf.String(), "worker started"); n != 2 {
		t.Errorf("records without a stream were folded:\n%s", buf.String())
	}
	if n := strings.Count(buf.String(), `"loading"`); n != 2 {
		t.Errorf("a worker's repeated line was folded:\n%s", buf.String())
	}
}

func TestSummarizeStart(t *testing.T) {
	cause := errors.New("worker: failed to boot: exit code 255; its last output:\nPHP Parse error")
	var errs []error
	for i := range 15 {
		errs = append(errs, fmt.Errorf("start worker %d: %w", i+1, cause))
	}
	errs = append(errs, fmt.Errorf("start worker 16: %w", errors.New("worker: boot timed out")))
	err := summarizeStart(errors.Join(errs...), 16)
	msg := err.Error()
	if strings.Count(msg, "PHP Parse error") != 1 || !strings.Contains(msg, "15 of 16 workers: worker: failed to boot") || !strings.Contains(msg, "1 of 16 workers: worker: boot timed out") {
		t.Errorf("summary:\n%s", msg)
	}
	if !errors.Is(err, cause) {
		t.Error("the summary does not wrap the causes")
	}
	plain := errors.New("one")
	if summarizeStart(plain, 1) != plain {
		t.Error("a single error was rewritten")
	}
}

// TestPHPLogNamesTheRequest: the request a classic-mode message names at its end (native/sapi.c)
// becomes the record's request attribute, on a one-line fatal and on an uncaught exception's
// folded trace alike; a line that only looks like it in its middle is left alone.
func TestPHPLogNamesTheRequest(t *testing.T) {
	var buf bytes.Buffer
	h := newPHPLog(slog.NewJSONHandler(&buf, nil))
	h.endBoot()
	log := slog.New(h).With("pid", 7)
	log.Warn(`PHP Fatal error:  Allowed memory size exhausted in /x.php on line 3, request: "GET /x.php?a=1 HTTP/1.1"`, "stream", "stderr")
	for _, line := range []string{"PHP Fatal error:  Uncaught Error: y in /y.php:2", "Stack trace:", "#0 {main}",
		`  thrown in /y.php on line 2, request: "POST /y.php/extra?\x22q\x22 HTTP/2.0"`} {
		log.Warn(line, "stream", "stderr")
	}
	log.Warn(`PHP Warning:  , request: "GET / HTTP/1.1" is a string here`, "stream", "stderr")
	recs := records(t, &buf)
	if len(recs) != 3 {
		t.Fatalf("want 3 records, got %d: %s", len(recs), buf.String())
	}
	for i, want := range []struct{ msg, request string }{
		{"PHP Fatal error:  Allowed memory size exhausted in /x.php on line 3", "GET /x.php?a=1 HTTP/1.1"},
		{"PHP Fatal error:  Uncaught Error: y in /y.php:2\nStack trace:\n#0 {main}\n  thrown in /y.php on line 2", `POST /y.php/extra?\x22q\x22 HTTP/2.0`},
		{`PHP Warning:  , request: "GET / HTTP/1.1" is a string here`, ""},
	} {
		req, _ := recs[i]["request"].(string)
		if recs[i]["msg"] != want.msg || req != want.request || recs[i]["pid"] != 7.0 {
			t.Errorf("record %d: %v; want msg %q, request %q", i, recs[i], want.msg, want.request)
		}
	}
}
