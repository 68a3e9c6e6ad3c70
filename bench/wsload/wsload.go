// Package wsload measures issue 26's WebSocket targets on the real server: the daemon's RSS
// growth per idle connection, how long a publish takes to reach every member of a channel
// that those connections joined, and echoes through PHP a second beside the same server's
// hello-world requests a second. bench/cmd/wsbench and make bench's websocket scenario run
// it. It starts and stops its own server; it asserts nothing.
package wsload

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gorilla "github.com/gorilla/websocket"
)

// Options say what to measure.
type Options struct {
	Peregrine string        // the binary
	Root      string        // the repository, for testdata/workers/websocket.php
	Conns     int           // idle connections, all in one channel
	Echo      int           // echoing connections, and HTTP clients for the hello-world rate
	Workers   int           // PHP workers
	Duration  time.Duration // of each rate pass
}

// Result is what Run measured.
type Result struct {
	Options
	HelloRate, EchoRate    float64 // a second
	Opened                 time.Duration
	RSSBefore, RSSAfter    int64
	PublishP50, PublishP99 time.Duration
	PublishMax             time.Duration
	Lost                   int64
}

// PerConn is the daemon's RSS growth per idle connection.
func (r *Result) PerConn() float64 { return float64(r.RSSAfter-r.RSSBefore) / float64(r.Conns) }

// String is the result in three lines.
func (r *Result) String() string {
	return fmt.Sprintf("hello-world: %.0f requests/s; echo through PHP: %.0f messages/s (%.2fx), %d clients, %d workers\n"+
		"idle: %d connections opened in %s (%.0f/s through onOpen); daemon RSS %.1f -> %.1f MiB: %.1f KiB a connection\n"+
		"publish to %d members: p50 %s, p99 %s, max %s, %d lost\n",
		r.HelloRate, r.EchoRate, r.EchoRate/r.HelloRate, r.Echo, r.Workers,
		r.Conns, r.Opened.Round(time.Millisecond), float64(r.Conns)/r.Opened.Seconds(), mib(r.RSSBefore), mib(r.RSSAfter), r.PerConn()/1024,
		r.Conns, r.PublishP50.Round(time.Millisecond), r.PublishP99.Round(time.Millisecond), r.PublishMax.Round(time.Millisecond), r.Lost)
}

// Run starts a server and measures.
func Run(ctx context.Context, o Options) (*Result, error) {
	res := &Result{Options: o}
	conns, echo, workers, dur := o.Conns, o.Echo, o.Workers, o.Duration
	dir, err := os.MkdirTemp("", "wsbench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	fixture := filepath.Join(o.Root, "testdata", "workers", "websocket.php")
	cfg := filepath.Join(dir, "peregrine.yaml")
	yaml := fmt.Sprintf("http:\n  address: 127.0.0.1:0\n  max_connections: %d\nworkers:\n  command: php %s\n  count: %d\n",
		conns+2*echo+100, fixture, workers)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, o.Peregrine, "serve", "-c", cfg)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	url, err := banner(stderr)
	if err != nil {
		return nil, err
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	ws := "ws" + strings.TrimPrefix(url, "http")
	time.Sleep(time.Second)

	// Hello-world requests a second, then echoes through PHP a second, on a quiet server.
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: echo}}
	reqs := rate(echo, dur, func(ctx context.Context) (func() bool, func()) {
		return func() bool {
			r, err := hc.Get(url + "/hello")
			if err != nil {
				return false
			}
			_, _ = io.Copy(io.Discard, r.Body)
			r.Body.Close()
			return r.StatusCode == 200
		}, func() {}
	})
	echoes := rate(echo, dur, func(ctx context.Context) (func() bool, func()) {
		c, _, err := gorilla.DefaultDialer.Dial(ws+"/e", nil)
		if err != nil {
			return func() bool { return false }, func() {}
		}
		msg := []byte("echo:" + strings.Repeat("x", 59))
		return func() bool {
			if c.WriteMessage(gorilla.TextMessage, msg) != nil {
				return false
			}
			_, _, err := c.ReadMessage()
			return err == nil
		}, func() { _ = c.Close() }
	})
	res.HelloRate, res.EchoRate = reqs, echoes

	// Idle connections, all members of one channel.
	time.Sleep(3 * time.Second)
	before := rss(cmd.Process.Pid)
	channel := "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	open := make([]*gorilla.Conn, 0, conns)
	start := time.Now()
	for i := 0; i < conns; i++ {
		c, _, err := gorilla.DefaultDialer.Dial(ws+"/b?join="+channel, nil)
		if err != nil {
			return nil, fmt.Errorf("connection %d: %w", i, err)
		}
		open = append(open, c)
	}
	opened := time.Since(start)
	time.Sleep(3 * time.Second) // the daemon returns start-up garbage when idle
	after := rss(cmd.Process.Pid)
	res.Opened, res.RSSBefore, res.RSSAfter = opened, before, after

	// One publish to all of them: when does each get it?
	var wg sync.WaitGroup
	lat := make([]time.Duration, conns)
	var lost atomic.Int64
	var sent time.Time
	ready := make(chan struct{})
	for i, c := range open {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-ready
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			if _, _, err := c.ReadMessage(); err != nil {
				lost.Add(1)
				return
			}
			lat[i] = time.Since(sent)
		}()
	}
	sent = time.Now()
	close(ready)
	resp, err := http.Get(url + "/publish?ch=" + channel + "&msg=x")
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	wg.Wait()
	slices.Sort(lat)
	res.PublishP50, res.PublishP99, res.PublishMax, res.Lost = lat[conns/2], lat[conns*99/100], lat[conns-1], lost.Load()
	for _, c := range open {
		_ = c.Close()
	}

	return res, nil
}

// rate runs n clients for d and returns the operations a second.
func rate(n int, d time.Duration, client func(context.Context) (func() bool, func())) float64 {
	var total atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			op, done := client(ctx)
			defer done()
			for ctx.Err() == nil && op() {
				total.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(total.Load()) / d.Seconds()
}

var bannerRE = regexp.MustCompile(`serving (http://\S+) with`)

func banner(r io.Reader) (string, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if m := bannerRE.FindStringSubmatch(sc.Text()); m != nil {
			return m[1], nil
		}
	}
	return "", fmt.Errorf("peregrine exited before its banner")
}

func rss(pid int) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			n, _ := strconv.ParseInt(strings.Fields(l)[1], 10, 64)
			return n << 10
		}
	}
	return 0
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
