package httpserver

import (
	"log/slog"
	"math"
	"net/http"
	"sync/atomic"
	"time"
)

// AccessLog is where the access log goes (log.access, log.access_file): a logger that can be
// replaced, or turned off with nil, while requests run (a config reload).
type AccessLog struct {
	l atomic.Pointer[slog.Logger]
}

// NewAccessLog returns an access log writing to l; nil starts it off.
func NewAccessLog(l *slog.Logger) *AccessLog {
	a := &AccessLog{}
	a.Set(l)
	return a
}

// Set sends the records of requests that start from now on to l; nil turns the log off.
func (a *AccessLog) Set(l *slog.Logger) { a.l.Store(l) }

func (a *AccessLog) logger() *slog.Logger {
	if a == nil {
		return nil
	}
	return a.l.Load()
}

// logAccess writes the access log's record of one finished request: the fields operators grep
// for, as nginx's combined format has them, and the worker that ran it. A request no worker ran
// (a static file, a refused request) has no "pid" field.
func logAccess(log *slog.Logger, r *http.Request, w *countingWriter, start time.Time) {
	attrs := make([]slog.Attr, 0, 14)
	attrs = append(attrs,
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path))
	if r.URL.RawQuery != "" {
		attrs = append(attrs, slog.String("query", r.URL.RawQuery))
	}
	attrs = append(attrs,
		slog.String("proto", r.Proto),
		slog.String("host", r.Host),
		slog.Int("status", w.status),
		slog.Int64("bytes", w.bytes),
		slog.Int64("bytes_in", w.bytesIn),
		// Milliseconds with microsecond precision: a number to sort and sum, not a Go duration.
		slog.Float64("duration_ms", math.Round(float64(time.Since(start))/1e3)/1e3))
	if w.pid != 0 {
		attrs = append(attrs, slog.Int("pid", w.pid))
	}
	attrs = append(attrs, slog.String("remote", r.RemoteAddr))
	if ua := r.UserAgent(); ua != "" {
		attrs = append(attrs, slog.String("user_agent", ua))
	}
	if ref := r.Referer(); ref != "" {
		attrs = append(attrs, slog.String("referer", ref))
	}
	log.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
}
