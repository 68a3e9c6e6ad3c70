package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A reset in direct mode (docs/direct.md, "Deploying behind a load balancer"): each new worker
// serves as soon as it has booted, the old ones drain in the background, bounded by their
// own limits rather than workers.stop_timeout.

// TestDirectResetCompletesASlowUpload: an upload still arriving when a reset begins gets its
// whole answer from the old worker, though it takes longer than workers.stop_timeout: the
// worker drains by its body_timeout per read, not by the reset's stop_timeout.
func TestDirectResetCompletesASlowUpload(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	s := startDirectApp(t, "  stop_timeout: 1s\nadmin:\n  address: "+addr+"\n")
	u := strings.TrimPrefix(s.URL, "http://")
	c, err := net.Dial("tcp", u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const chunk, chunks = 1000, 3
	head := fmt.Sprintf("POST /echo-size HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n", u, chunk*chunks)
	if _, err := io.WriteString(c, head+strings.Repeat("a", chunk)); err != nil {
		t.Fatal(err)
	}
	// A worker has read the head and the first chunk (its counters say so): the reset finds
	// the upload arriving in it.
	eventually(t, 10*time.Second, "the first chunk read", func() bool {
		return metric(t, "http://"+addr, "peregrine_direct_received_bytes_total") >= float64(len(head)+chunk)
	})
	s.signal(syscall.SIGHUP)
	for range chunks - 1 {
		time.Sleep(time.Second + 200*time.Millisecond) // the body takes longer than stop_timeout
		if _, err := io.WriteString(c, strings.Repeat("b", chunk)); err != nil {
			t.Fatalf("the upload was cut: %v", err)
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to the upload across the reset: %v\n%s", err, s.log.String())
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 || len(body) != chunk*chunks || !resp.Close {
		t.Fatalf("answer %d, %d bytes (%v), close %v; want 200, %d bytes, Connection: close", resp.StatusCode, len(body), err, resp.Close, chunk*chunks)
	}
	s.log.waitFor(t, `all workers replaced`, 30*time.Second)
	if n := s.log.count(`ended while draining`); n != 0 {
		t.Errorf("%d old workers were killed while draining:\n%s", n, s.log.String())
	}
}

// TestDirectResetDrainsWorkersTogether: a reset does not wait for one old worker's drain
// before it replaces the next: every slot serves a new worker while all the old ones still
// finish their requests, which `peregrine workers` lists as draining. So a reset takes one
// drain (idle connections' 1 s grace, a running request), not one per worker. The order of
// events is checked, not times: each old worker is held by a request running until the test
// ends it (hold_test.go), once it has seen every slot replaced.
func TestDirectResetDrainsWorkersTogether(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	s := startServer(t, strings.Replace(strings.Replace(directConfig, "%s", holdWorker(t), 1), "count: 2", "count: 3", 1)+
		"admin:\n  address: "+addr+"\n")
	adminURL := "http://" + addr
	h := newHold(t)
	// One request that waits in each worker, each sent once the one before runs (a worker
	// busy in PHP accepts nothing, so it lands on another).
	var answers []<-chan outcome
	var old []int
	for i := 1; i <= 3; i++ {
		answers = append(answers, getAsync(s.URL+h.path(), "Connection", "close"))
		eventually(t, 20*time.Second, strconv.Itoa(i)+" busy workers", func() bool {
			old = old[:0]
			for _, w := range workersOf(t, adminURL) {
				if w.State == "busy" {
					old = append(old, w.PID)
				}
			}
			return len(old) == i
		})
	}
	s.signal(syscall.SIGHUP)
	s.log.waitFor(t, `(?s)(worker replaced.*){3}`, 60*time.Second)
	// Every slot has its new worker; the old ones all still run their requests.
	for _, pid := range old {
		if err := syscall.Kill(pid, 0); err != nil {
			t.Errorf("old worker %d gone before the last slot was replaced: the drains were not together (%v)", pid, err)
		}
	}
	var draining []int
	for _, w := range workersOf(t, adminURL) {
		if w.State == "draining" {
			draining = append(draining, w.PID)
		}
	}
	slices.Sort(old)
	slices.Sort(draining)
	if !slices.Equal(draining, old) {
		t.Errorf("peregrine workers lists %v as draining, want the old workers %v", draining, old)
	}
	if n := metric(t, adminURL, `peregrine_workers{state="draining"}`); n != 3 {
		t.Errorf(`peregrine_workers{state="draining"} %v, want 3`, n)
	}
	if r := get(t, adminURL+"/ready"); r.Status != 200 || !strings.Contains(string(r.Body), "of 3 workers") {
		t.Errorf("/ready during the drains: %d %s", r.Status, r.Body)
	}
	h.release()
	for _, c := range answers {
		if o := <-c; o.err != nil || o.Status != 200 {
			t.Errorf("a request running across the reset: %v, %d %s", o.err, o.Status, o.Body)
		}
	}
	s.log.waitFor(t, `all workers replaced`, 30*time.Second)
	if n := s.log.count(`old worker drained`); n != 3 {
		t.Errorf("%d old workers drained, want 3:\n%s", n, s.log.String())
	}
}

// directWorker is a row of GET /workers.
type directWorker struct {
	Slot  int    `json:"slot"`
	PID   int    `json:"pid"`
	State string `json:"state"`
}

func workersOf(t *testing.T, adminURL string) []directWorker {
	t.Helper()
	r := get(t, adminURL+"/workers")
	var ws []directWorker
	if err := json.Unmarshal(r.Body, &ws); r.Status != 200 || err != nil {
		t.Fatalf("/workers: %d %s (%v)", r.Status, r.Body, err)
	}
	return ws
}

// TestDirectResetsInARowLeaveNothing: five resets in a row under load fail no request, and
// once they are over no old worker remains (only the current ones run), every old worker
// drained to its end, and the daemon holds as many descriptors as before.
func TestDirectResetsInARowLeaveNothing(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	s := startDirectApp(t, "admin:\n  address: "+addr+"\n")
	workersOf(t, "http://"+addr) // the test's kept-alive admin connection is counted before and after
	fds := fdTargets(t, s.cmd.Process.Pid)
	l := startDirectLoad(t, s, 16, http.MethodPost)
	for i := 1; i <= 5; i++ {
		s.signal(syscall.SIGHUP)
		eventually(t, 60*time.Second, "reset "+strconv.Itoa(i), func() bool { return s.log.count(`all workers replaced`) >= i })
	}
	l.stop(t)
	if n := s.log.count(`old worker drained`); n != 10 {
		t.Errorf("%d old workers drained, want 10:\n%s", n, s.log.String())
	}
	live := slices.DeleteFunc(processesTagged(s.tag), func(pid int) bool { return pid == s.cmd.Process.Pid })
	var current []int
	for _, w := range workersOf(t, "http://"+addr) {
		if w.State == "draining" {
			t.Errorf("worker %d still draining after the resets", w.PID)
		}
		current = append(current, w.PID)
	}
	slices.Sort(live)
	slices.Sort(current)
	if !slices.Equal(live, current) {
		t.Errorf("PHP processes %v after the resets, want only the current workers %v", live, current)
	}
	for _, m := range regexp.MustCompile(`"old_pid":(\d+)`).FindAllStringSubmatch(s.log.String(), -1) {
		pid, _ := strconv.Atoi(m[1])
		if slices.Contains(live, pid) {
			t.Errorf("old worker %d still runs", pid)
		}
	}
	// Idle now: the workers' pipes and nothing else, as before the resets.
	var now map[string]int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if now = fdTargets(t, s.cmd.Process.Pid); maps.Equal(now, fds) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon's descriptors by kind: %v after the resets, %v before", now, fds)
		}
	}
}

// fdTargets counts process pid's lasting descriptors by kind: what they link to, without the
// inode ("pipe", "socket", "anon_inode:[eventpoll]", or the file's path).
func fdTargets(t *testing.T, pid int) map[string]int {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, e := range entries {
		target, err := os.Readlink(dir + "/" + e.Name())
		if err != nil || strings.HasPrefix(target, "/proc/") {
			continue // closed meanwhile, or a file of /proc read at that moment (memory.go's smaps)
		}
		if i := strings.Index(target, ":["); i > 0 && !strings.HasPrefix(target, "anon_inode") {
			target = target[:i]
		}
		n[target]++
	}
	return n
}
