package admin

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peregrinephp/peregrine/internal/pool"
)

// states are the worker states always reported by peregrine_workers, 0 included, so that a
// dashboard's stack keeps its colours.
var states = [...]pool.State{pool.StateReady, pool.StateBusy, pool.StateStarting, pool.StateBackoff, pool.StateStopping, pool.StateDraining}

var (
	queueDesc = prometheus.NewDesc("peregrine_pool_queue_depth",
		"Requests waiting for a free worker.", nil, nil)
	workersDesc = prometheus.NewDesc("peregrine_workers",
		"Worker slots by state: ready, busy, starting, backoff (restarting after failures), stopping; and draining: old workers a reset took out of their slots in direct mode, finishing what they serve.",
		[]string{"state"}, nil)
	rssDesc = prometheus.NewDesc("peregrine_worker_rss_bytes",
		"Resident set size of the PHP process in each worker slot.", []string{"worker"}, nil)
)

// poolCollector reads the pool's gauges at scrape time: one Workers and one Waiting call and
// one /proc/PID/statm read per worker, no process spawned. Before the server is told the pool
// has started it reports nothing, because the pool is still being built.
type poolCollector struct{ s *Server }

var _ prometheus.Collector = poolCollector{}

// Describe implements prometheus.Collector.
func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueDesc
	ch <- workersDesc
	ch <- rssDesc
}

// Collect implements prometheus.Collector.
func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.s.started.Load() {
		return
	}
	ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(c.s.pool.Waiting()))
	ws := c.s.pool.Workers()
	var counts [len(states)]int
	var other map[pool.State]int
	for _, w := range ws {
		if w.Group != "" {
			continue // the gauges are the server's own workers'; their slots are other workers'
		}
		if i := stateIndex(w.State); i >= 0 {
			counts[i]++
		} else {
			if other == nil {
				other = make(map[pool.State]int)
			}
			other[w.State]++
		}
		if w.PID > 0 && w.State != pool.StateDraining { // the slot's label is its current worker's
			if rss, err := c.s.rss(w.PID); err == nil {
				ch <- prometheus.MustNewConstMetric(rssDesc, prometheus.GaugeValue, float64(rss), strconv.Itoa(w.Slot))
			}
		}
	}
	for i, st := range states {
		ch <- prometheus.MustNewConstMetric(workersDesc, prometheus.GaugeValue, float64(counts[i]), string(st))
	}
	for st, n := range other {
		ch <- prometheus.MustNewConstMetric(workersDesc, prometheus.GaugeValue, float64(n), string(st))
	}
}

func stateIndex(st pool.State) int {
	for i, s := range states {
		if s == st {
			return i
		}
	}
	return -1
}
