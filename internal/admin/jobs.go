package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
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
func (s *Server) jobRoutes(mux *http.ServeMux) {
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
