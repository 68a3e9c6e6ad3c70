package websocket

import (
	"maps"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// stats counts what the hub did, for the metrics endpoint and `peregrine websocket`.
type stats struct {
	opened      atomic.Int64
	refused     atomic.Int64
	messagesIn  atomic.Int64
	messagesOut atomic.Int64

	mu             sync.Mutex
	closes         map[int]int64
	publishes      int64
	publishSeconds float64
	publishBuckets [len(PublishBuckets)]int64
}

// PublishBuckets are the upper bounds, in seconds, of the publish latency histogram.
var PublishBuckets = [...]float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}

func (s *stats) closed(code int) {
	s.mu.Lock()
	s.closes[code]++
	s.mu.Unlock()
}

func (s *stats) published(d time.Duration) {
	sec := d.Seconds()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.publishes++
	s.publishSeconds += sec
	for i, b := range PublishBuckets {
		if sec <= b {
			s.publishBuckets[i]++
		}
	}
}

// Stats is a snapshot of a hub.
type Stats struct {
	Node        string        `json:"node"`
	Connections int           `json:"connections"`
	Opened      int64         `json:"opened"`
	Refused     int64         `json:"refused"`
	MessagesIn  int64         `json:"messages_in"`
	MessagesOut int64         `json:"messages_out"`
	Closes      map[int]int64 `json:"closes"` // by close code
	Publishes   int64         `json:"publishes"`
	// PublishSeconds is the sum of publish latencies; PublishBuckets counts publishes at or
	// under each of PublishBuckets (cumulative, as Prometheus histograms are).
	PublishSeconds float64        `json:"publish_seconds"`
	PublishBuckets []int64        `json:"publish_buckets"`
	Channels       map[string]int `json:"channels"` // members here, by channel
	Open           []ConnInfo     `json:"open,omitempty"`
}

// ConnInfo describes one open connection.
type ConnInfo struct {
	ID       string   `json:"id"`
	Path     string   `json:"path"`
	Remote   string   `json:"remote"`
	Channels []string `json:"channels"`
}

// Stats returns the hub's counters, its channels and, with conns, its connections.
func (h *Hub) Stats(conns bool) Stats {
	st := Stats{Node: h.node, Opened: h.stats.opened.Load(), Refused: h.stats.refused.Load(),
		MessagesIn: h.stats.messagesIn.Load(), MessagesOut: h.stats.messagesOut.Load(), Channels: map[string]int{}}
	h.stats.mu.Lock()
	st.Closes = maps.Clone(h.stats.closes)
	st.Publishes, st.PublishSeconds = h.stats.publishes, h.stats.publishSeconds
	st.PublishBuckets = append([]int64(nil), h.stats.publishBuckets[:]...)
	h.stats.mu.Unlock()
	h.mu.RLock()
	st.Connections = len(h.conns)
	for name, m := range h.channels {
		st.Channels[name] = len(m)
	}
	if conns {
		for _, c := range h.conns {
			info := ConnInfo{ID: c.id, Path: c.base.Path, Remote: c.base.RemoteAddr + ":" + c.base.RemotePort}
			for ch := range c.channels {
				info.Channels = append(info.Channels, ch)
			}
			sort.Strings(info.Channels)
			st.Open = append(st.Open, info)
		}
	}
	h.mu.RUnlock()
	sort.Slice(st.Open, func(i, j int) bool { return st.Open[i].ID < st.Open[j].ID })
	return st
}
