//go:build stress

package integration

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestStressOverload offers 20 times the pool's capacity for 20 s with max_queue set, between
// two stretches at 75% of it. Four workers each answer GET /sleep?ms=50, so the pool serves
// 80 requests per second; the burst offers 1,600. The excess gets 503 with Retry-After within
// allocate_timeout, what is accepted succeeds, the daemon's RSS stays bounded, and after the
// burst every request succeeds again, as fast as before it, within 2 s.
func TestStressOverload(t *testing.T) {
	const (
		workers    = 4
		serviceMS  = 50
		capacity   = workers * 1000 / serviceMS // requests per second
		maxQueue   = 8
		allocate   = 2 * time.Second
		rssBound   = 64 << 20 // growth over the pre-burst RSS
		recoverBy  = 2 * time.Second
		quietShare = 0.75
	)
	s := startStress(t, fmt.Sprintf("workers:\n  command: php %s\n  count: %d\n  max_queue: %d\n  allocate_timeout: %s\n",
		fixture(t, "app.php"), workers, maxQueue, allocate))
	rss := sampleRSS(t, s.pid(), 50*time.Millisecond)
	pre, burst, post := scaled(8*time.Second), scaled(20*time.Second), scaled(8*time.Second)
	quiet := quietShare * capacity
	l := startLoad(t, s.URL, loadOptions{
		Phases: []phase{{quiet, pre}, {20 * capacity, burst}, {quiet, post}},
		Conns:  256,
		Request: func(int) (string, string, []byte, http.Header) {
			return "GET", fmt.Sprintf("/sleep?ms=%d", serviceMS), nil, nil
		},
	})
	res := l.wait()
	burstAt := res.Start.Add(pre)
	burstEnd := burstAt.Add(burst)

	// Before the burst: everything succeeds; its latency is the reference.
	before := res.between(burstAt.Add(-pre/2), burstAt)
	if bad := before.notOK(); len(bad) > 0 {
		t.Errorf("%d requests failed before the burst:%s", len(bad), describe(bad))
	}
	refP99 := before.percentile(99, nil)

	// During the burst: 200 or 503 with Retry-After within allocate_timeout; nothing else.
	during := res.between(burstAt, burstEnd)
	ok, shed := 0, 0
	var slowestShed time.Duration
	var other []shot
	for _, r := range during.Shots {
		switch {
		case r.Status == 200:
			ok++
		case r.Status == http.StatusServiceUnavailable && r.Retry != "":
			shed++
			slowestShed = max(slowestShed, r.Latency)
		default:
			other = append(other, r)
		}
	}
	if len(other) > 0 {
		t.Errorf("%d requests got neither 200 nor 503 with Retry-After during the burst:%s", len(other), describe(other))
	}
	if slowestShed > allocate {
		t.Errorf("a 503 took %s, longer than allocate_timeout %s", slowestShed, allocate)
	}
	if offered := during.rate(); offered < 10*capacity {
		t.Errorf("the burst offered only %.0f req/s (%d skipped by the generator); want about %d", offered, res.Skipped, 20*capacity)
	}

	// After the burst: from some moment on every request succeeds as fast as before.
	after := res.between(burstEnd, res.End)
	limit := max(2*refP99, refP99+50*time.Millisecond)
	recoveredAt := burstEnd
	for _, r := range after.Shots {
		if r.Status != 200 || r.Latency > limit {
			recoveredAt = r.Start.Add(time.Nanosecond)
		}
	}
	back := recoveredAt.Sub(burstEnd)
	if back > recoverBy {
		t.Errorf("requests succeeded as fast as before the burst only %s after it (bound %s); latency limit %s; after the burst:%s",
			back, recoverBy, limit, describe(after.notOK()))
	}
	goodputBefore := float64(before.ok()) / (pre / 2).Seconds()
	settled := after.between(recoveredAt, res.End)
	goodputAfter := float64(settled.ok()) / res.End.Sub(recoveredAt).Seconds()

	basis := rss.peak(res.Start, burstAt)
	peak := rss.peak(burstAt, burstEnd)
	end := rss.peak(burstEnd, time.Now())
	if peak > basis+rssBound {
		t.Errorf("the daemon's RSS grew from %s to %s during the burst (bound +%s)", mib(basis), mib(peak), mib(rssBound))
	}
	s.awaitFull(t, 10*time.Second)
	figures(t, "capacity %d req/s; burst %.0f req/s for %s: %d served, %d shed with 503 + Retry-After (slowest %s), %d other; RSS %s before, %s peak, %s after; goodput %.0f req/s before, %.0f after, back %s after the burst (p99 %s before)",
		capacity, during.rate(), burst, ok, shed, ms(slowestShed), len(other), mib(basis), mib(peak), mib(end),
		goodputBefore, goodputAfter, ms(back), ms(refP99))
}
