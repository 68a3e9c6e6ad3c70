package admin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peregrinephp/peregrine/internal/tables"
)

// Tables gives the figures of the shared tables (docs/tables.md); *tables.Segment is one.
type Tables interface {
	Stats() ([]tables.Stat, error)
}

// Table is one shared table as GET /tables lists it.
type Table = tables.Stat

// tablesList answers GET /tables: each table's rows, capacity and bytes; an empty list when the
// config defines none.
func (s *Server) tablesList(w http.ResponseWriter, _ *http.Request) {
	list := []tables.Stat{}
	if s.tables != nil {
		var err error
		if list, err = s.tables.Stats(); err != nil {
			text(w, http.StatusInternalServerError, err.Error())
			return
		}
	}
	writeJSON(w, http.StatusOK, list)
}

// Tables returns the running server's shared tables (GET /tables).
func (c *Client) Tables(ctx context.Context) ([]Table, error) {
	var ts []Table
	err := c.call(ctx, http.MethodGet, "/tables", &ts)
	return ts, err
}

// WriteTables writes ts as the aligned table peregrine tables prints.
func WriteTables(w io.Writer, ts []Table) error {
	if len(ts) == 0 {
		_, err := fmt.Fprintln(w, "no tables (tables.define is empty)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tROWS\tCAPACITY\tUSED\tMEMORY\tROW\tREAD RETRIES")
	for _, t := range ts {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f%%\t%s\t%d B\t%d\n", t.Name, t.Rows, t.Capacity,
			100*float64(t.Rows)/float64(max(t.Capacity, 1)), formatBytes(t.Bytes), t.RowBytes, t.ReadRetries)
	}
	return tw.Flush()
}

var (
	tableRowsDesc = prometheus.NewDesc("peregrine_table_rows",
		"Rows used in each shared table.", []string{"table"}, nil)
	tableCapacityDesc = prometheus.NewDesc("peregrine_table_capacity",
		"Fixed capacity in rows of each shared table.", []string{"table"}, nil)
	tableBytesDesc = prometheus.NewDesc("peregrine_table_bytes",
		"Shared memory each table takes: rows, buckets and its state block.", []string{"table"}, nil)
	tableRetriesDesc = prometheus.NewDesc("peregrine_table_read_retries_total",
		"Lock-free reads of each shared table that a concurrent write spoiled and that started again.", []string{"table"}, nil)
)

// tablesCollector reads the tables' figures at scrape time.
type tablesCollector struct{ t Tables }

// Describe implements prometheus.Collector.
func (c tablesCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tableRowsDesc
	ch <- tableCapacityDesc
	ch <- tableBytesDesc
	ch <- tableRetriesDesc
}

// Collect implements prometheus.Collector.
func (c tablesCollector) Collect(ch chan<- prometheus.Metric) {
	stats, err := c.t.Stats()
	if err != nil {
		return
	}
	for _, t := range stats {
		ch <- prometheus.MustNewConstMetric(tableRowsDesc, prometheus.GaugeValue, float64(t.Rows), t.Name)
		ch <- prometheus.MustNewConstMetric(tableCapacityDesc, prometheus.GaugeValue, float64(t.Capacity), t.Name)
		ch <- prometheus.MustNewConstMetric(tableBytesDesc, prometheus.GaugeValue, float64(t.Bytes), t.Name)
		ch <- prometheus.MustNewConstMetric(tableRetriesDesc, prometheus.CounterValue, float64(t.ReadRetries), t.Name)
	}
}
