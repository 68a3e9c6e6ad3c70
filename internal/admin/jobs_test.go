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

// emailsPipeline serves a memory pipeline, emails, without retries, through an admin listener
// and returns it, its driver, the listener and a client of it.
func emailsPipeline(t *testing.T) (*jobs.Pipeline, *jobs.Memory, *Server, *Client) {
	t.Helper()
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
	return p, mem, s, c
}

// failAll consumes p's jobs with fail until dead jobs lie in its dead letters.
func failAll(t *testing.T, p *jobs.Pipeline, mem *jobs.Memory, dead int64, fail func(*jobs.Job) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Consume(ctx, 1, func(_ context.Context, j *jobs.Job) error { return fail(j) })
	}()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, _ := mem.Stats(ctx); st.Dead == dead {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d failing jobs never reached the dead letters", dead)
		}
	}
}

// TestJobsThroughTheClient: the client behind peregrine jobs lists, pushes to, pauses, resumes
// and revives a real (memory) pipeline over TCP; /metrics has its figures.
func TestJobsThroughTheClient(t *testing.T) {
	p, mem, s, c := emailsPipeline(t)
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
	if _, err := c.PushJob(ctx, "emails", `2`, 0); err != nil {
		t.Fatal(err)
	}
	failAll(t, p, mem, 1, func(*jobs.Job) error { return errors.New("no") })
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

// TestDeadLettersThroughTheClient: dead letters listed (big payloads cut), shown whole, retried
// and deleted one by one; an unknown id is a 404 that says so, and a retried or deleted one is
// gone from the list.
func TestDeadLettersThroughTheClient(t *testing.T) {
	p, mem, _, c := emailsPipeline(t)
	ctx := context.Background()
	big := `"` + strings.Repeat("x", jobs.MaxPayload-2) + `"`
	var ids []string
	for _, payload := range []string{`1`, big, `3`} {
		id, err := p.Push(ctx, payload, map[string]string{"k": "v"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	failAll(t, p, mem, 3, func(j *jobs.Job) error { return errors.New("no: " + j.Payload[:1]) })

	list, err := c.DeadJobs(ctx, "emails", 100)
	if err != nil || len(list) != 3 || list[1].ID != ids[1] || len(list[1].Payload) != maxListedPayload+3 || list[0].Error != "no: 1" {
		t.Fatalf("DeadJobs = %d jobs, %v", len(list), err)
	}
	if two, err := c.DeadJobs(ctx, "emails", 2); err != nil || len(two) != 2 {
		t.Errorf("DeadJobs with a limit of 2 = %d, %v", len(two), err)
	}
	var out bytes.Buffer
	if err := WriteDeadTable(&out, list); err != nil || !strings.Contains(out.String(), ids[0]+"  1        ") {
		t.Errorf("WriteDeadTable: %v\n%s", err, out.String())
	}
	j, err := c.DeadJob(ctx, "emails", ids[1])
	if err != nil || j.Payload != big || j.Headers["k"] != "v" || j.Died == 0 {
		t.Fatalf("DeadJob: %d bytes of payload, %v", len(j.Payload), err)
	}
	out.Reset()
	if err := WriteDeadJob(&out, j); err != nil || !strings.Contains(out.String(), "header:   k: v") || !strings.Contains(out.String(), "error:\nno: \"") {
		t.Errorf("WriteDeadJob: %v\n%.300s", err, out.String())
	}
	if _, err := c.DeadJob(ctx, "emails", "nope"); err == nil || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), "no such dead letter") {
		t.Errorf("DeadJob of an unknown id: %v", err)
	}
	if err := c.RetryDeadJob(ctx, "emails", ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.RetryDeadJob(ctx, "emails", ids[0]); err == nil || !strings.Contains(err.Error(), "no such dead letter") {
		t.Errorf("a second retry of one dead letter: %v", err)
	}
	if err := c.DeleteDeadJob(ctx, "emails", ids[2]); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteDeadJob(ctx, "emails", ids[2]); err == nil || !strings.Contains(err.Error(), "no such dead letter") {
		t.Errorf("a second delete of one dead letter: %v", err)
	}
	if list, err := c.DeadJobs(ctx, "emails", 100); err != nil || len(list) != 1 || list[0].ID != ids[1] {
		t.Errorf("after a retry and a delete: %d dead letters, %v", len(list), err)
	}
	if st, _ := mem.Stats(ctx); st.Queued != 1 || st.Dead != 1 {
		t.Errorf("stats after a retry and a delete: %+v", st)
	}
}

// TestDeadLetterListingLimit: ?limit= is bounded (an answer of up to 1000 letters of 1 KiB of
// payload each), and an empty listing is [], not null.
func TestDeadLetterListingLimit(t *testing.T) {
	_, _, s, _ := emailsPipeline(t)
	for _, tc := range []struct {
		limit string
		code  int
		body  string
	}{
		{"", 200, "[]"},
		{"1", 200, "[]"},
		{"1000", 200, "[]"},
		{"1001", 400, "from 1 to 1000"},
		{"0", 400, "from 1 to 1000"},
		{"many", 400, "from 1 to 1000"},
	} {
		path := "/jobs/emails/dead"
		if tc.limit != "" {
			path += "?limit=" + tc.limit
		}
		if code, body := get(t, s, "GET", path); code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("GET %s = %d %q; want %d with %q", path, code, body, tc.code, tc.body)
		}
	}
}
