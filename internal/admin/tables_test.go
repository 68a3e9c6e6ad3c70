package admin

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/peregrinephp/peregrine/internal/tables"
)

type fakeTables []tables.Stat

func (f fakeTables) Stats() ([]tables.Stat, error) { return f, nil }

// TestTables: GET /tables lists the tables, /metrics has their gauges, and peregrine tables'
// text names each with its rows, capacity and memory.
func TestTables(t *testing.T) {
	ft := fakeTables{{Name: "visits", Rows: 7, Capacity: 100, Bytes: 5248, RowBytes: 40, ReadRetries: 12}}
	s, err := newServer(Options{Pool: &fakePool{}, Tables: ft})
	if err != nil {
		t.Fatal(err)
	}
	code, body := get(t, s, http.MethodGet, "/tables")
	var got []tables.Stat
	if code != 200 || json.Unmarshal([]byte(body), &got) != nil || len(got) != 1 || got[0] != ft[0] {
		t.Fatalf("GET /tables = %d %s", code, body)
	}
	_, metrics := get(t, s, http.MethodGet, "/metrics")
	for _, want := range []string{`peregrine_table_rows{table="visits"} 7`, `peregrine_table_capacity{table="visits"} 100`,
		`peregrine_table_bytes{table="visits"} 5248`, `peregrine_table_read_retries_total{table="visits"} 12`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	var out bytes.Buffer
	if err := WriteTables(&out, got); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "visits  7     100       7.0%  5.1 KiB  40 B  12") {
		t.Errorf("WriteTables:\n%s", out.String())
	}

	// Without tables the list is empty, not an error.
	s, err = newServer(Options{Pool: &fakePool{}})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, s, http.MethodGet, "/tables"); code != 200 || strings.TrimSpace(body) != "[]" {
		t.Errorf("GET /tables without tables = %d %q", code, body)
	}
}
