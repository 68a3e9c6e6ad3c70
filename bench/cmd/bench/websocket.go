package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/peregrinephp/peregrine/bench/wsload"
)

// websocketScenario measures issue 26's targets (bench/wsload): 10,000 idle WebSocket
// connections (2,000 in a quick pass), a publish to all of them, and echoes through PHP beside
// hello-world requests on the same server.
func (l *lab) websocketScenario(p plan) (*wsload.Result, error) {
	conns, dur := 10000, p.delayDur
	if p.runs <= 1 {
		conns = 2000
	}
	if dur <= 0 {
		dur = 5 * time.Second
	}
	res, err := wsload.Run(l.ctx, wsload.Options{Peregrine: l.peregrine, Root: l.root, Conns: conns, Echo: 50, Workers: 2, Duration: dur})
	if err != nil {
		return nil, fmt.Errorf("websocket: %w", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(res.String()), "\n") {
		logf("  websocket: %s", line)
	}
	return res, nil
}

// websocketMarkdown is the report's section for the websocket scenario.
func websocketMarkdown(r *wsload.Result) string {
	if r == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("## WebSockets (issue 26)\n\n")
	fmt.Fprintf(&b, "testdata/workers/websocket.php on %d workers (native runtime): %d idle connections that all joined one channel, "+
		"one publish to it, then %d connections echoing 64 bytes through PHP against %d HTTP clients on the same server's hello-world, %s each.\n\n",
		r.Workers, r.Conns, r.Echo, r.Echo, r.Duration)
	b.WriteString("| target | goal | measured |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| daemon RSS per idle connection | <= 16 KiB (moonshot 8) | %.1f KiB (%.1f -> %.1f MiB) |\n",
		r.PerConn()/1024, float64(r.RSSBefore)/(1<<20), float64(r.RSSAfter)/(1<<20))
	fmt.Fprintf(&b, "| a publish to all %d | p99 <= 1 s, none lost | p50 %s, p99 %s, %d lost |\n", r.Conns,
		r.PublishP50.Round(time.Millisecond), r.PublishP99.Round(time.Millisecond), r.Lost)
	fmt.Fprintf(&b, "| echo through PHP / hello-world | >= 0.5x | %.0f / %.0f a second: %.2fx |\n\n", r.EchoRate, r.HelloRate, r.EchoRate/r.HelloRate)
	return b.String()
}
