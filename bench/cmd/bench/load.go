package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// A result is what one load run measured.
type result struct {
	rps      float64
	p50, p99 time.Duration
	requests int // completed (any status)
	non2xx   int // completed with a status other than 2xx or 3xx
	sockErr  int // connect and write errors and timeouts (wrk), or failed requests (ab)
	readErr  int // read errors (wrk)
	closed   int // read errors that are the server closing the connection after each answer
	aborted  string
	mean     time.Duration // the mean time per request, from h2load (which gives no percentiles)
	cpu      time.Duration // CPU time the server's processes used during the run
	// otherCores is how many cores, on average, processes other than the server and the load
	// generator kept busy during the run: other work on the machine.
	otherCores float64
}

// cpuPerRequest is the server's CPU time per answered request.
func (r result) cpuPerRequest() time.Duration {
	if r.requests == 0 {
		return 0
	}
	return r.cpu / time.Duration(r.requests)
}

// failed is every request that did not get a good answer.
func (r result) failed() int { return r.non2xx + r.sockErr + r.readErr }

// wrkThreads is the load generator's thread count for every system: the machine has 2 cores
// and the generator competes with the server for them.
const wrkThreads = 2

// runWrk runs wrk with keep-alive connections for d against url, with the request headers
// given ("Name: value").
func runWrk(ctx context.Context, url string, conns int, d time.Duration, headers ...string) (result, error) {
	threads := min(wrkThreads, conns)
	args := []string{"-t" + strconv.Itoa(threads), "-c" + strconv.Itoa(conns),
		"-d" + strconv.Itoa(int(d.Seconds())) + "s", "--timeout", "60s", "--latency"}
	for _, h := range headers {
		args = append(args, "-H", h)
	}
	out, err := command(ctx, "wrk", append(args, url)...)
	if ctx.Err() != nil {
		return result{}, ctx.Err()
	}
	if err != nil {
		return result{}, fmt.Errorf("wrk: %w\n%s", err, out)
	}
	return parseWrk(out)
}

var (
	wrkRPS      = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	wrkRequests = regexp.MustCompile(`(\d+) requests in`)
	wrkSocket   = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	wrkNon2xx   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	wrkPct      = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([\d.]+)(us|ms|s|m|h)\s*$`)
)

func parseWrk(out string) (result, error) {
	var r result
	m := wrkRPS.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("wrk: no Requests/sec in its output:\n%s", out)
	}
	r.rps, _ = strconv.ParseFloat(m[1], 64)
	if m := wrkRequests.FindStringSubmatch(out); m != nil {
		r.requests, _ = strconv.Atoi(m[1])
	}
	if m := wrkSocket.FindStringSubmatch(out); m != nil {
		for i, s := range m[1:] {
			n, _ := strconv.Atoi(s)
			if i == 1 {
				r.readErr = n
			} else {
				r.sockErr += n
			}
		}
	}
	if m := wrkNon2xx.FindStringSubmatch(out); m != nil {
		r.non2xx, _ = strconv.Atoi(m[1])
	}
	for _, m := range wrkPct.FindAllStringSubmatch(out, -1) {
		d := wrkDuration(m[2], m[3])
		if m[1] == "50" {
			r.p50 = d
		} else {
			r.p99 = d
		}
	}
	return r, nil
}

func wrkDuration(num, unit string) time.Duration {
	v, _ := strconv.ParseFloat(num, 64)
	scale := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second,
		"m": time.Minute, "h": time.Hour}[unit]
	return time.Duration(v * float64(scale))
}

// runAb runs ApacheBench: n requests, c at a time, keep-alive or not. An ab that gives up
// (it stops at the first connection reset) is a result with the unfinished requests failed.
func runAb(ctx context.Context, url string, n, c int, keepAlive bool) (result, error) {
	args := []string{"-n", strconv.Itoa(n), "-c", strconv.Itoa(c), "-s", "120"}
	if keepAlive {
		args = append(args, "-k")
	}
	out, err := command(ctx, "ab", append(args, url)...)
	if ctx.Err() != nil {
		return result{}, ctx.Err()
	}
	r := parseAb(out)
	if err != nil {
		done := r.requests
		if m := abTotal.FindStringSubmatch(out); m != nil {
			done, _ = strconv.Atoi(m[1])
		}
		r.aborted = firstLine(out, "apr_")
		if r.aborted == "" {
			r.aborted = err.Error()
		}
		r.requests = done
		r.sockErr += n - done
		return r, nil
	}
	return r, nil
}

var (
	abRPS      = regexp.MustCompile(`Requests per second:\s+([\d.]+)`)
	abComplete = regexp.MustCompile(`Complete requests:\s+(\d+)`)
	abFailed   = regexp.MustCompile(`Failed requests:\s+(\d+)`)
	abNon2xx   = regexp.MustCompile(`Non-2xx responses:\s+(\d+)`)
	abPct      = regexp.MustCompile(`(?m)^\s+(50|99)%\s+(\d+)`)
	abTotal    = regexp.MustCompile(`Total of (\d+) requests completed`)
)

func parseAb(out string) result {
	var r result
	if m := abRPS.FindStringSubmatch(out); m != nil {
		r.rps, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := abComplete.FindStringSubmatch(out); m != nil {
		r.requests, _ = strconv.Atoi(m[1])
	}
	if m := abFailed.FindStringSubmatch(out); m != nil {
		// ab's "failed" counts connect, receive, length and exception failures.
		r.sockErr, _ = strconv.Atoi(m[1])
	}
	if m := abNon2xx.FindStringSubmatch(out); m != nil {
		r.non2xx, _ = strconv.Atoi(m[1])
	}
	for _, m := range abPct.FindAllStringSubmatch(out, -1) {
		ms, _ := strconv.Atoi(m[2])
		if m[1] == "50" {
			r.p50 = time.Duration(ms) * time.Millisecond
		} else {
			r.p99 = time.Duration(ms) * time.Millisecond
		}
	}
	return r
}

func firstLine(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), prefix) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// command runs a load generator and returns its stdout and stderr together.
func command(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	return buf.String(), err
}

// runH2load runs nghttp2's h2load over HTTP/2 (TLS with ALPN for an https URL) for d: clients
// connections, each with up to streams requests in flight, on wrkThreads threads. It reports
// no percentiles, only the mean time per request.
func runH2load(ctx context.Context, url string, clients, streams int, d time.Duration) (result, error) {
	out, err := command(ctx, "h2load", "-t"+strconv.Itoa(min(wrkThreads, clients)), "-c"+strconv.Itoa(clients),
		"-m"+strconv.Itoa(streams), "-D", strconv.Itoa(int(d.Seconds())), url)
	if ctx.Err() != nil {
		return result{}, ctx.Err()
	}
	if err != nil {
		return result{}, fmt.Errorf("h2load: %w\n%s", err, out)
	}
	return parseH2load(out)
}

var (
	h2RPS      = regexp.MustCompile(`finished in [\d.]+\w+, ([\d.]+) req/s`)
	h2Requests = regexp.MustCompile(`requests: \d+ total, \d+ started, (\d+) done, \d+ succeeded, (\d+) failed, (\d+) errored, (\d+) timeout`)
	h2Status   = regexp.MustCompile(`status codes: \d+ 2xx, \d+ 3xx, (\d+) 4xx, (\d+) 5xx`)
	h2Mean     = regexp.MustCompile(`time for request:\s+\S+\s+\S+\s+([\d.]+)(us|ms|s)`)
	h2Proto    = regexp.MustCompile(`Application protocol: (\S+)`)
)

func parseH2load(out string) (result, error) {
	var r result
	m := h2RPS.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("h2load: no req/s in its output:\n%s", out)
	}
	if p := h2Proto.FindStringSubmatch(out); p == nil || p[1] != "h2" {
		return r, fmt.Errorf("h2load: the server did not speak HTTP/2:\n%s", out)
	}
	r.rps, _ = strconv.ParseFloat(m[1], 64)
	// "failed" counts every request that did not succeed: 4xx and 5xx answers, and those that
	// "errored" (no answer) or timed out.
	failed := 0
	if m := h2Requests.FindStringSubmatch(out); m != nil {
		r.requests, _ = strconv.Atoi(m[1])
		failed, _ = strconv.Atoi(m[2])
	}
	if m := h2Status.FindStringSubmatch(out); m != nil {
		for _, s := range m[1:] {
			n, _ := strconv.Atoi(s)
			r.non2xx += n
		}
	}
	r.sockErr = max(failed-r.non2xx, 0)
	if m := h2Mean.FindStringSubmatch(out); m != nil {
		r.mean = wrkDuration(m[1], m[2])
	}
	return r, nil
}
