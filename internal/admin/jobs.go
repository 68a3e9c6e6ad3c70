package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peregrinephp/peregrine/internal/jobs"
)

// Jobs is what the admin listener needs of the server's pipelines; *jobs.Set is one.
type Jobs interface {
	// Status returns every pipeline's state, sorted by name.
	Status(ctx context.Context) []jobs.Status
	// Get returns a pipeline, or an error wrapping jobs.ErrUnknownPipeline.
	Get(name string) (*jobs.Pipeline, error)
}

var _ Jobs = (*jobs.Set)(nil)

// Job routes:
//
//	GET  /jobs                   JSON list of jobs.Status, one per pipeline
//	POST /jobs/{pipeline}/push   body {"payload": "JSON text", "delay": seconds}; answers {"id": ...}
//	POST /jobs/{pipeline}/retry  dead letters back to the queue; answers {"retried": n}
//	POST /jobs/{pipeline}/pause  this server's consumers stop taking its jobs; answers {"paused": true}
//	POST /jobs/{pipeline}/resume answers {"paused": false}
//	GET  /jobs/{pipeline}/dead?limit=N        the dead letters, oldest first (jobs.Job, 100 by default,
//	                                          at most 1000; payloads cut to 1 KiB)
//	GET  /jobs/{pipeline}/dead/{id}           one dead letter; 404 if there is none
//	POST /jobs/{pipeline}/dead/{id}/retry     back to the queue as a first attempt; answers {"retried": 1}
//	DELETE /jobs/{pipeline}/dead/{id}         removed; answers {"deleted": 1}
func (s *Server) jobRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /jobs/{pipeline}/dead", s.jobsDead)
	mux.HandleFunc("GET /jobs/{pipeline}/dead/{id}", s.jobsDeadOne)
	mux.HandleFunc("POST /jobs/{pipeline}/dead/{id}/retry", s.jobsDeadOne)
	mux.HandleFunc("DELETE /jobs/{pipeline}/dead/{id}", s.jobsDeadOne)
	mux.HandleFunc("GET /jobs", s.jobsList)
	mux.HandleFunc("POST /jobs/{pipeline}/push", s.jobsPush)
	mux.HandleFunc("POST /jobs/{pipeline}/retry", s.jobsRetry)
	mux.HandleFunc("POST /jobs/{pipeline}/pause", s.jobsPause)
	mux.HandleFunc("POST /jobs/{pipeline}/resume", s.jobsPause)
}

// statusTimeout bounds asking the brokers for a listing or a scrape.
const statusTimeout = 5 * time.Second

func (s *Server) jobsList(w http.ResponseWriter, r *http.Request) {
	list := []jobs.Status{}
	if s.jobs != nil {
		ctx, cancel := context.WithTimeout(r.Context(), statusTimeout)
		defer cancel()
		list = append(list, s.jobs.Status(ctx)...)
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) pipeline(w http.ResponseWriter, r *http.Request) *jobs.Pipeline {
	if s.jobs == nil {
		text(w, http.StatusNotFound, "this server has no jobs.pipelines")
		return nil
	}
	p, err := s.jobs.Get(r.PathValue("pipeline"))
	if err != nil {
		text(w, http.StatusNotFound, err.Error())
		return nil
	}
	return p
}

// PushRequest is the body of POST /jobs/{pipeline}/push.
type PushRequest struct {
	Payload string  `json:"payload"` // JSON text
	Delay   float64 `json:"delay"`   // seconds
}

func (s *Server) jobsPush(w http.ResponseWriter, r *http.Request) {
	p := s.pipeline(w, r)
	if p == nil {
		return
	}
	var req PushRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 8*jobs.MaxPayload)).Decode(&req); err != nil {
		text(w, http.StatusBadRequest, "want a JSON body {\"payload\": \"...\", \"delay\": seconds}: "+err.Error())
		return
	}
	if !json.Valid([]byte(req.Payload)) {
		text(w, http.StatusBadRequest, "the payload is not JSON")
		return
	}
	if req.Delay < 0 {
		text(w, http.StatusBadRequest, "a negative delay")
		return
	}
	id, err := p.Push(r.Context(), req.Payload, map[string]string{"pushed-by": "peregrine jobs push"}, time.Duration(req.Delay*float64(time.Second)))
	if err != nil {
		text(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"id": id})
}

func (s *Server) jobsRetry(w http.ResponseWriter, r *http.Request) {
	p := s.pipeline(w, r)
	if p == nil {
		return
	}
	n, err := p.Retry(r.Context())
	if err != nil {
		text(w, http.StatusInternalServerError, fmt.Sprintf("retried %d, then: %v", n, err))
		return
	}
	s.log.Info("dead letters back in the queue", "pipeline", p.Name(), "count", n)
	writeJSON(w, http.StatusOK, map[string]int{"retried": n})
}

func (s *Server) jobsDead(w http.ResponseWriter, r *http.Request) {
	p := s.pipeline(w, r)
	if p == nil {
		return
	}
	limit := 100
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxDeadListed {
			text(w, http.StatusBadRequest, fmt.Sprintf("limit: want a number from 1 to %d, got %q", MaxDeadListed, l))
			return
		}
		limit = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), statusTimeout)
	defer cancel()
	// A listing of payloads of up to 1 MiB each would outgrow what a client reads, and what this
	// server holds to answer: each is cut as it is read. GET /jobs/{pipeline}/dead/{id} gives it whole.
	list, err := p.DeadLetters(ctx, limit, maxListedPayload)
	if err != nil {
		text(w, http.StatusInternalServerError, err.Error())
		return
	}
	if list == nil {
		list = []*jobs.Job{} // [], not null
	}
	writeJSON(w, http.StatusOK, list)
}

// GET /jobs/{pipeline}/dead lists at most MaxDeadListed dead letters, each payload cut to
// maxListedPayload bytes: an answer of at most about 1 MiB of payloads.
const (
	MaxDeadListed    = 1000
	maxListedPayload = 1 << 10
)

// jobsDeadOne shows, retries or deletes one dead letter.
func (s *Server) jobsDeadOne(w http.ResponseWriter, r *http.Request) {
	p := s.pipeline(w, r)
	if p == nil {
		return
	}
	id := r.PathValue("id")
	var out any
	var err error
	switch r.Method {
	case http.MethodGet:
		out, err = p.DeadLetter(r.Context(), id)
	case http.MethodPost:
		if err = p.RetryDead(r.Context(), id); err == nil {
			s.log.Info("a dead letter back in the queue", "pipeline", p.Name(), "id", id)
			out = map[string]int{"retried": 1}
		}
	default:
		if err = p.DeleteDead(r.Context(), id); err == nil {
			s.log.Info("a dead letter deleted", "pipeline", p.Name(), "id", id)
			out = map[string]int{"deleted": 1}
		}
	}
	switch {
	case errors.Is(err, jobs.ErrNoSuchJob):
		text(w, http.StatusNotFound, err.Error())
	case err != nil:
		text(w, http.StatusInternalServerError, err.Error())
	default:
		writeJSON(w, http.StatusOK, out)
	}
}

func (s *Server) jobsPause(w http.ResponseWriter, r *http.Request) {
	p := s.pipeline(w, r)
	if p == nil {
		return
	}
	pause := r.Pattern == "POST /jobs/{pipeline}/pause"
	if pause {
		p.Pause()
	} else {
		p.Resume()
	}
	s.log.Info("pipeline "+map[bool]string{true: "paused", false: "resumed"}[pause], "pipeline", p.Name())
	writeJSON(w, http.StatusOK, map[string]bool{"paused": pause})
}

// Jobs returns the running server's pipelines (GET /jobs).
func (c *Client) Jobs(ctx context.Context) ([]jobs.Status, error) {
	var list []jobs.Status
	err := c.call(ctx, http.MethodGet, "/jobs", &list)
	return list, err
}

// PushJob pushes a job with payload (JSON text) to a pipeline and returns its id.
func (c *Client) PushJob(ctx context.Context, pipeline, payload string, delay time.Duration) (string, error) {
	b, _ := json.Marshal(PushRequest{Payload: payload, Delay: delay.Seconds()})
	var out struct{ ID string }
	err := c.callBody(ctx, http.MethodPost, "/jobs/"+url.PathEscape(pipeline)+"/push", bytes.NewReader(b), &out)
	return out.ID, err
}

// RetryJobs moves a pipeline's dead letters back to its queue and returns how many.
func (c *Client) RetryJobs(ctx context.Context, pipeline string) (int, error) {
	var out struct{ Retried int }
	err := c.call(ctx, http.MethodPost, "/jobs/"+url.PathEscape(pipeline)+"/retry", &out)
	return out.Retried, err
}

// DeadJobs lists up to limit of a pipeline's dead letters, oldest first.
func (c *Client) DeadJobs(ctx context.Context, pipeline string, limit int) ([]jobs.Job, error) {
	var list []jobs.Job
	err := c.call(ctx, http.MethodGet, "/jobs/"+url.PathEscape(pipeline)+"/dead?limit="+strconv.Itoa(limit), &list)
	return list, err
}

// DeadJob returns the dead letter of job id.
func (c *Client) DeadJob(ctx context.Context, pipeline, id string) (jobs.Job, error) {
	var j jobs.Job
	err := c.call(ctx, http.MethodGet, "/jobs/"+url.PathEscape(pipeline)+"/dead/"+url.PathEscape(id), &j)
	return j, err
}

// RetryDeadJob moves the dead letter of job id back to the queue.
func (c *Client) RetryDeadJob(ctx context.Context, pipeline, id string) error {
	return c.call(ctx, http.MethodPost, "/jobs/"+url.PathEscape(pipeline)+"/dead/"+url.PathEscape(id)+"/retry", &map[string]int{})
}

// DeleteDeadJob removes the dead letter of job id.
func (c *Client) DeleteDeadJob(ctx context.Context, pipeline, id string) error {
	return c.call(ctx, http.MethodDelete, "/jobs/"+url.PathEscape(pipeline)+"/dead/"+url.PathEscape(id), &map[string]int{})
}

// WriteDeadTable writes dead letters as peregrine jobs dead prints them:
//
//	ID                                ATTEMPT  DIED                  PAYLOAD           ERROR
//	4f0c...                           3        2026-11-28T20:01:02Z  {"to":"a@b.org"}  consumer 812 answered 500: ...
//
// PAYLOAD is cut to 40 bytes and ERROR to one line of 100; peregrine jobs dead PIPELINE show ID
// prints them whole.
func WriteDeadTable(w io.Writer, list []jobs.Job) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tATTEMPT\tDIED\tPAYLOAD\tERROR")
	for _, j := range list {
		died := "-"
		if j.Died > 0 {
			died = time.UnixMilli(j.Died).UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", j.ID, j.Attempt, died, oneLine(j.Payload, 40), oneLine(j.Error, 100))
	}
	return tw.Flush()
}

// oneLine returns s on one line, cut to n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n-3] + "..."
	}
	return s
}

// WriteDeadJob writes one dead letter whole, as peregrine jobs dead PIPELINE show ID prints it.
func WriteDeadJob(w io.Writer, j jobs.Job) error {
	var b strings.Builder
	fmt.Fprintf(&b, "id:       %s\npipeline: %s\nattempt:  %d\n", j.ID, j.Pipeline, j.Attempt)
	fmt.Fprintf(&b, "pushed:   %s\n", time.UnixMilli(j.Pushed).UTC().Format(time.RFC3339Nano))
	if j.Died > 0 {
		fmt.Fprintf(&b, "died:     %s\n", time.UnixMilli(j.Died).UTC().Format(time.RFC3339Nano))
	}
	if j.Life > 0 {
		fmt.Fprintf(&b, "revived:  %d times before\n", j.Life)
	}
	keys := slices.Sorted(maps.Keys(j.Headers))
	for _, k := range keys {
		fmt.Fprintf(&b, "header:   %s: %s\n", k, j.Headers[k])
	}
	fmt.Fprintf(&b, "payload:  %s\nerror:\n%s\n", j.Payload, j.Error)
	_, err := io.WriteString(w, b.String())
	return err
}

// PauseJobs pauses (or, with pause false, resumes) a pipeline's consumers on the server.
func (c *Client) PauseJobs(ctx context.Context, pipeline string, pause bool) error {
	verb := "resume"
	if pause {
		verb = "pause"
	}
	var out struct{ Paused bool }
	return c.call(ctx, http.MethodPost, "/jobs/"+url.PathEscape(pipeline)+"/"+verb, &out)
}

// WriteJobsTable writes list as the aligned table peregrine jobs prints:
//
//	PIPELINE  DRIVER  QUEUED  DELAYED  RUNNING  FAILED  DEAD  CONSUMERS  STATE
//	emails    redis   12      3        2        1       0     4          running
//
// QUEUED, DELAYED, RUNNING and DEAD are the broker's (every server's); FAILED counts the failed
// attempts of this server since it started; CONSUMERS are its consume loops.
func WriteJobsTable(w io.Writer, list []jobs.Status) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PIPELINE\tDRIVER\tQUEUED\tDELAYED\tRUNNING\tFAILED\tDEAD\tCONSUMERS\tSTATE")
	for _, p := range list {
		state := "running"
		switch {
		case p.Error != "":
			state = "error: " + p.Error
		case p.Paused:
			state = "paused"
		case p.Consumers == 0:
			state = "no consumers here"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", p.Name, p.Driver, p.Queued, p.Delayed, p.Running,
			p.Failed, p.Dead, p.Consumers, state)
	}
	return tw.Flush()
}

var (
	jobsDesc = prometheus.NewDesc("peregrine_jobs",
		"Jobs in each pipeline's broker by state: queued, delayed, running, dead (every server's).",
		[]string{"pipeline", "state"}, nil)
	jobsCounterDesc = prometheus.NewDesc("peregrine_jobs_total",
		"Job events on this server by pipeline: pushed, done, failed (attempts), retried, dead.",
		[]string{"pipeline", "event"}, nil)
	jobsAgeDesc = prometheus.NewDesc("peregrine_jobs_queue_age_seconds",
		"How long the last job this server received had waited since it was due.", []string{"pipeline"}, nil)
)

// jobsCollector reads the pipelines' figures at scrape time, asking each broker once.
type jobsCollector struct{ jobs Jobs }

var _ prometheus.Collector = jobsCollector{}

// Describe implements prometheus.Collector.
func (c jobsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- jobsDesc
	ch <- jobsCounterDesc
	ch <- jobsAgeDesc
}

// Collect implements prometheus.Collector.
func (c jobsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	for _, p := range c.jobs.Status(ctx) {
		if p.Error == "" {
			for state, n := range map[string]int64{"queued": p.Queued, "delayed": p.Delayed, "running": p.Running, "dead": p.Dead} {
				ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(n), p.Name, state)
			}
		}
		for event, n := range map[string]int64{"pushed": p.Pushed, "done": p.Done, "failed": p.Failed, "retried": p.Retried, "dead": p.DeadLettered} {
			ch <- prometheus.MustNewConstMetric(jobsCounterDesc, prometheus.CounterValue, float64(n), p.Name, event)
		}
		ch <- prometheus.MustNewConstMetric(jobsAgeDesc, prometheus.GaugeValue, p.QueueAge, p.Name)
	}
}
