package httpserver

import (
	"log/slog"
	"math"
	"net/http"
	"time"
)

// logAccess writes the access log's record of one finished request (log.access): the fields
// operators grep for, as nginx's combined format has them, and the worker that ran it. A
// request no worker ran (a static file, a refused request) has no "pid" field.
func (h *Handler) logAccess(r *http.Request, w *countingWriter, start time.Time, pid int, bytesIn int64) {
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
		slog.Int64("bytes_in", bytesIn),
		// Milliseconds with microsecond precision: a number to sort and sum, not a Go duration.
		slog.Float64("duration_ms", math.Round(float64(time.Since(start))/1e3)/1e3))
	if pid != 0 {
		attrs = append(attrs, slog.Int("pid", pid))
	}
	attrs = append(attrs, slog.String("remote", r.RemoteAddr))
	if ua := r.UserAgent(); ua != "" {
		attrs = append(attrs, slog.String("user_agent", ua))
	}
	if ref := r.Referer(); ref != "" {
		attrs = append(attrs, slog.String("referer", ref))
	}
	log := h.opts.AccessLogger
	if log == nil {
		log = h.log
	}
	log.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
}
