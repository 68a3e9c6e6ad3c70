package admin

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/peregrinephp/peregrine/internal/jobs"
)

// TestJobsThroughTheClient: the client behind peregrine jobs lists, pushes to, pauses, resumes
// and revives a real (memory) pipeline over TCP; /metrics has its figures.
func TestJobsThroughTheClient(t *testing.T) {
	set := jobs.NewSet()
	mem := jobs.NewMemory()
	p := jobs.New(jobs.Options{Name: "emails", Driver: mem, Retries: 0, DeadLetter: true})
	set.Add(p, "memory")
	t.Cleanup(func() { _ = set.Close() })
	s := startServerWith(t, Options{Pool: &fakePool{}, Jobs: set})
	c, err := NewClient(s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	id, err := c.PushJob(ctx, "emails", `{"to":"a"}`, time.Minute)
	if err != nil || len(id) != 32 {
		t.Fatalf("PushJob = %q, %v", id, err)
	}
	if _, err := c.PushJob(ctx, "emails", `not json`, 0); err == nil || !strings.Contains(err.Error(), "not JSON") {
		t.Errorf("PushJob of a payload that is not JSON: %v", err)
	}
	if _, err := c.PushJob(ctx, "nope", `1`, 0); err == nil || !strings.Contains(err.Error(), `no such pipeline: "nope"`) {
		t.Errorf("PushJob to an unknown pipeline: %v", err)
	}
	if err := c.PauseJobs(ctx, "emails", true); err != nil {
		t.Fatal(err)
	}
	list, err := c.Jobs(ctx)
	if err != nil || len(list) != 1 || !list[0].Paused || list[0].Delayed != 1 || list[0].Pushed != 1 {
		t.Fatalf("Jobs = %+v, %v", list, err)
	}
	var out bytes.Buffer
	if err := WriteJobsTable(&out, list); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "emails    memory  0       1        0        0       0     0          paused") {
		t.Errorf("WriteJobsTable:\n%s", out.String())
	}
	if err := c.PauseJobs(ctx, "emails", false); err != nil {
		t.Fatal(err)
	}

	// A job that fails its only attempt is dead; retry puts it back.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Consume(cctx, 1, func(context.Context, *jobs.Job) error { return errors.New("no") })
	}()
	if _, err := c.PushJob(ctx, "emails", `2`, 0); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, _ := mem.Stats(ctx); st.Dead == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the failing job never reached the dead letters")
		}
	}
	cancel()
	<-done
	if n, err := c.RetryJobs(ctx, "emails"); n != 1 || err != nil {
		t.Errorf("RetryJobs = %d, %v", n, err)
	}
	if st, _ := mem.Stats(ctx); st.Dead != 0 || st.Queued != 1 {
		t.Errorf("after RetryJobs: %+v", st)
	}
	_, metrics := get(t, s, "GET", "/metrics")
	for _, want := range []string{`peregrine_jobs{pipeline="emails",state="queued"} 1`,
		`peregrine_jobs_total{event="dead",pipeline="emails"} 1`, `peregrine_jobs_total{event="pushed",pipeline="emails"} 2`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// Without pipelines the list is empty and the verbs say why.
	s2, err := newServer(Options{Pool: &fakePool{}})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, s2, "GET", "/jobs"); code != 200 || strings.TrimSpace(body) != "[]" {
		t.Errorf("GET /jobs without pipelines = %d %q", code, body)
	}
	if code, body := get(t, s2, "POST", "/jobs/x/retry"); code != 404 || !strings.Contains(body, "no jobs.pipelines") {
		t.Errorf("POST /jobs/x/retry without pipelines = %d %q", code, body)
	}
}
