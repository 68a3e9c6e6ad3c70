package main

import (
	"net"
	"strings"
	"testing"
	"time"
)

func TestConcRowCeiling(t *testing.T) {
	for _, tc := range []struct {
		row  concRow
		want float64
	}{
		{concRow{workers: 4, slots: 256, conns: 1000}, 20000},                                // seed 002: the connections limit
		{concRow{workers: 4, slots: 32, conns: 128}, 2560},                                   // MySQL: 4 x 32
		{concRow{workers: 4, slots: 1, conns: 1000}, 80},                                     // PHP-FPM: the children limit
		{concRow{workers: 4, slots: 256, conns: 1000, wait1: 100 * time.Millisecond}, 10000}, // Redis's 100 ms timeouts
	} {
		if got := tc.row.ceiling(); got < tc.want-0.01 || got > tc.want+0.01 {
			t.Errorf("%+v: ceiling %.2f, want %.0f", tc.row, got, tc.want)
		}
	}
}

func TestConcMarkdown(t *testing.T) {
	c := &concResult{rows: []*concRow{
		{wait: "usleep(50000)", system: "Peregrine, concurrency 256", workers: 4, slots: 256, conns: 1000,
			runs: []result{{rps: 18000, requests: 72000, p50: 52 * time.Millisecond, p99: 90 * time.Millisecond, cpu: 72 * time.Second, otherCores: 0.25}}},
		{wait: "usleep(50000)", system: sysFPM, workers: 4, slots: 1, conns: 1000,
			runs: []result{{rps: 80, requests: 320, non2xx: 2, p50: time.Second, p99: 2 * time.Second}}},
		{wait: "phpredis BLPOP", system: "Peregrine, concurrency 256", workers: 4, slots: 256, conns: 1000,
			skipped: "Redis not reachable on 127.0.0.1:6379 | x"},
	}}
	md := c.markdown()
	for _, want := range []string{
		"| usleep(50000) | Peregrine, concurrency 256 | 4 x 256 | 1000 | 18,000 | 90% of 20,000 | 52 ms | 90 ms | 1.00 ms | 0.25 | 0 / 72000 |  |",
		"| usleep(50000) | nginx + PHP-FPM | 4 | 1000 | 80.0 | 100% of 80.0 | 1.00 s | 2.00 s | – | 0.00 | 2 / 320 | 225× |",
		"not measured: Redis not reachable on 127.0.0.1:6379 / x |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if (*concResult)(nil).markdown() != "" {
		t.Error("a scenario not run wrote a section")
	}
}

func TestJobsMarkdown(t *testing.T) {
	j := &jobsResult{rows: []*jobsRow{
		{driver: "memory", target: 20000, consumers: 2, httpWorkers: 4, latencyConns: 1, pushLoadConns: 16,
			jobs: 30000, drain: 1500 * time.Millisecond, drainCPU: 3 * time.Second, drainOther: 0.5, pushLoad: result{rps: 12000},
			noop: result{p50: 100 * time.Microsecond, p99: 2 * time.Millisecond}, push: result{p50: 300 * time.Microsecond, p99: time.Millisecond}},
		{driver: "nats", target: 10000, skipped: "nats not reachable on 127.0.0.1:4222"},
	}}
	md := j.markdown()
	for _, want := range []string{
		"| memory | 20,000 (30000 jobs in 1.5s) | 100% of 20,000 | 12,000 | 100 µs / 2.00 ms | 300 µs / 1.00 ms | +200 µs / −1.00 ms | 100 µs | 0.50 | 0 |",
		"| nats | not measured: nats not reachable on 127.0.0.1:4222 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestServiceChecks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if got := tcpMissing("X", addr); got != "" {
		t.Errorf("a listening port reported missing: %q", got)
	}
	ln.Close()
	if got := tcpMissing("X", addr); !strings.Contains(got, "X not reachable on "+addr) {
		t.Errorf("a closed port: %q", got)
	}
	if got := fileMissing("/nonexistent/peregrine", "php-nothing"); !strings.Contains(got, "php-nothing not installed") {
		t.Errorf("a missing file: %q", got)
	}
	if got := phpExtMissing("peregrine_no_such_extension"); got == "" {
		t.Error("a missing PHP extension reported present")
	}
	if got := phpExtMissing("json"); got != "" {
		t.Errorf("json reported missing: %q", got)
	}
}
