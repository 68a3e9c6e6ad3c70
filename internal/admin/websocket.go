package admin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peregrinephp/peregrine/internal/websocket"
)

// WebSocket gives the figures of the server's WebSocket connections (docs/websocket.md);
// *websocket.Hub is one.
type WebSocket interface {
	Stats(conns bool) websocket.Stats
}

// WebSocketStats is what GET /websocket answers.
type WebSocketStats = websocket.Stats

// websocketList answers GET /websocket: the counters, the channels and every open connection;
// 404 in classic mode, which has none.
func (s *Server) websocketList(w http.ResponseWriter, _ *http.Request) {
	if s.websocket == nil {
		text(w, http.StatusNotFound, "no WebSockets: classic mode holds none")
		return
	}
	writeJSON(w, http.StatusOK, s.websocket.Stats(true))
}

// WebSocket returns the running server's WebSocket figures (GET /websocket).
func (c *Client) WebSocket(ctx context.Context) (WebSocketStats, error) {
	var st WebSocketStats
	err := c.call(ctx, http.MethodGet, "/websocket", &st)
	return st, err
}

// WriteWebSocket writes st as peregrine websocket prints it: a summary, the channels and the
// open connections.
func WriteWebSocket(w io.Writer, st WebSocketStats) error {
	fmt.Fprintf(w, "node %s: %d open, %d opened, %d refused; messages in %d, out %d; %d publishes\n",
		st.Node, st.Connections, st.Opened, st.Refused, st.MessagesIn, st.MessagesOut, st.Publishes)
	if len(st.Closes) > 0 {
		codes := make([]int, 0, len(st.Closes))
		for c := range st.Closes {
			codes = append(codes, c)
		}
		sort.Ints(codes)
		parts := make([]string, len(codes))
		for i, c := range codes {
			parts[i] = fmt.Sprintf("%d: %d", c, st.Closes[c])
		}
		fmt.Fprintf(w, "closes by code: %s\n", strings.Join(parts, ", "))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(st.Channels) > 0 {
		names := make([]string, 0, len(st.Channels))
		for n := range st.Channels {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintln(tw, "\nCHANNEL\tSUBSCRIBERS HERE")
		for _, n := range names {
			fmt.Fprintf(tw, "%s\t%d\n", n, st.Channels[n])
		}
	}
	if len(st.Open) > 0 {
		fmt.Fprintln(tw, "\nCONNECTION\tREMOTE\tPATH\tCHANNELS")
		for _, c := range st.Open {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.ID, c.Remote, c.Path, strings.Join(c.Channels, ","))
		}
	}
	return tw.Flush()
}

var (
	wsConnectionsDesc = prometheus.NewDesc("peregrine_websocket_connections",
		"Open WebSocket connections on this server.", nil, nil)
	wsOpenedDesc = prometheus.NewDesc("peregrine_websocket_opened_total",
		"WebSocket connections opened (onOpen accepted).", nil, nil)
	wsRefusedDesc = prometheus.NewDesc("peregrine_websocket_refused_total",
		"WebSocket upgrades refused: Origin, the connection cap, onOpen's Refused or failure.", nil, nil)
	wsMessagesDesc = prometheus.NewDesc("peregrine_websocket_messages_total",
		"WebSocket messages received (in) and sent (out).", []string{"direction"}, nil)
	wsClosesDesc = prometheus.NewDesc("peregrine_websocket_closes_total",
		"WebSocket connections closed, by close code.", []string{"code"}, nil)
	wsPublishDesc = prometheus.NewDesc("peregrine_websocket_publish_seconds",
		"Time to hand a publish to the channel's members here, or to the broker.", nil, nil)
)

// websocketCollector reads the hub's figures at scrape time.
type websocketCollector struct{ ws WebSocket }

// Describe implements prometheus.Collector.
func (c websocketCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{wsConnectionsDesc, wsOpenedDesc, wsRefusedDesc, wsMessagesDesc, wsClosesDesc, wsPublishDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c websocketCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.ws.Stats(false)
	ch <- prometheus.MustNewConstMetric(wsConnectionsDesc, prometheus.GaugeValue, float64(st.Connections))
	ch <- prometheus.MustNewConstMetric(wsOpenedDesc, prometheus.CounterValue, float64(st.Opened))
	ch <- prometheus.MustNewConstMetric(wsRefusedDesc, prometheus.CounterValue, float64(st.Refused))
	ch <- prometheus.MustNewConstMetric(wsMessagesDesc, prometheus.CounterValue, float64(st.MessagesIn), "in")
	ch <- prometheus.MustNewConstMetric(wsMessagesDesc, prometheus.CounterValue, float64(st.MessagesOut), "out")
	for code, n := range st.Closes {
		ch <- prometheus.MustNewConstMetric(wsClosesDesc, prometheus.CounterValue, float64(n), strconv.Itoa(code))
	}
	buckets := make(map[float64]uint64, len(websocket.PublishBuckets))
	for i, b := range websocket.PublishBuckets {
		if i < len(st.PublishBuckets) {
			buckets[b] = uint64(st.PublishBuckets[i])
		}
	}
	ch <- prometheus.MustNewConstHistogram(wsPublishDesc, uint64(st.Publishes), st.PublishSeconds, buckets)
}
