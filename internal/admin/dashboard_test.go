package admin

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The Grafana dashboard in docs/ must only query metrics that /metrics serves.
func TestDashboardQueriesServedMetrics(t *testing.T) {
	raw, err := os.ReadFile("../../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	s, _, m := newTestServer(t)
	m.Request("GET", 200, time.Millisecond, 1, 1)
	m.Waited(0)
	served := scrape(t, s)
	name := regexp.MustCompile(`\b(?:peregrine|go|process)_[a-z_]+`)
	queries := 0
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			queries++
			for _, metric := range name.FindAllString(target.Expr, -1) {
				family := metric
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if f, ok := strings.CutSuffix(metric, suffix); ok && served[f] != nil {
						family = f
					}
				}
				if served[family] == nil {
					t.Errorf("panel %q queries %s, which /metrics does not serve", p.Title, metric)
				}
			}
		}
	}
	if queries == 0 {
		t.Error("the dashboard has no queries")
	}
}
