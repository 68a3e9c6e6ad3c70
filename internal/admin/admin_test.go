package admin

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/peregrinephp/peregrine/internal/pool"
)

// fakePool is a Pool whose workers and reset outcome the test sets.
type fakePool struct {
	mu       sync.Mutex
	workers  []pool.WorkerInfo
	waiting  int
	resetErr error
	resets   int
	// resetting, if set, receives a value when Reset starts, which then waits for ctx.
	resetting chan struct{}
}

func (f *fakePool) Workers() []pool.WorkerInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]pool.WorkerInfo(nil), f.workers...)
}

func (f *fakePool) Ready() int {
	n := 0
	for _, w := range f.Workers() {
		if w.Group == "" && (w.State == pool.StateReady || w.State == pool.StateBusy) { // the server's own, as the daemon's
			n++
		}
	}
	return n
}

func (f *fakePool) Waiting() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waiting
}

func (f *fakePool) Reset(ctx context.Context) error {
	if f.resetting != nil {
		f.resetting <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resets++
	return f.resetErr
}

func (f *fakePool) setStates(states ...pool.State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.workers = f.workers[:0]
	for i, st := range states {
		f.workers = append(f.workers, pool.WorkerInfo{
			Slot: i + 1, PID: 1000 + i, State: st, Requests: int64(10 * i),
			Started: time.Now().Add(-time.Hour),
		})
	}
}

// fakeRSS gives worker pid 1000+i an RSS of (i+1) MiB.
func fakeRSS(pid int) (int64, error) {
	if pid < 1000 {
		return 0, errors.New("no such process")
	}
	return int64(pid-999) << 20, nil
}

// newTestServer returns a started server over a pool of two ready workers.
func newTestServer(t *testing.T) (*Server, *fakePool, *Metrics) {
	t.Helper()
	fp := &fakePool{}
	fp.setStates(pool.StateReady, pool.StateReady)
	m := NewMetrics()
	s, err := newServer(Options{Pool: fp, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	s.rss = fakeRSS
	s.SetStarted()
	return s, fp, m
}

// get runs one request through the server's routes.
func get(t *testing.T, s *Server, method, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(method, path, nil)
	req.Host = "127.0.0.1:9180"
	s.handler.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// scrape reads /metrics and parses it.
func scrape(t *testing.T, s *Server) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := get(t, s, http.MethodGet, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return mfs
}

// value returns the value of the series of name whose labels include want (name=value pairs),
// summing when several match; for a histogram it returns the sample count. -1 if none matches.
func value(mfs map[string]*dto.MetricFamily, name string, want ...string) float64 {
	mf, ok := mfs[name]
	if !ok {
		return -1
	}
	total, found := 0.0, false
metrics:
	for _, m := range mf.GetMetric() {
		for i := 0; i+1 < len(want); i += 2 {
			match := false
			for _, l := range m.GetLabel() {
				if l.GetName() == want[i] && l.GetValue() == want[i+1] {
					match = true
				}
			}
			if !match {
				continue metrics
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		}
	}
	if !found {
		return -1
	}
	return total
}

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
