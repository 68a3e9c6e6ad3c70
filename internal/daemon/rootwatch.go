package daemon

import (
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/peregrinephp/peregrine/internal/httpserver"
)

// rootCheck tells the log why requests get 403 or 404 when the document root cannot be read
// (its permissions, a mount gone): the handler answers them like any missing file, and an
// operator would otherwise see only the statuses. It is an httpserver.Observer chained before
// the metrics; it looks at the root after a 403 or 404 at most once per rootCheckEvery, and
// logs once per rootCheckEvery while the root stays unreadable.
type rootCheck struct {
	root string
	log  *slog.Logger
	next httpserver.Observer // the metrics, or nil

	mu   sync.Mutex
	last time.Time // of the last look at the root
}

const rootCheckEvery = 10 * time.Second

func (c *rootCheck) Request(method string, status int, d time.Duration, bytesIn, bytesOut int64) {
	if c.next != nil {
		c.next.Request(method, status, d, bytesIn, bytesOut)
	}
	if status != http.StatusForbidden && status != http.StatusNotFound {
		return
	}
	c.mu.Lock()
	now := time.Now()
	due := now.Sub(c.last) >= rootCheckEvery
	if due {
		c.last = now
	}
	c.mu.Unlock()
	if !due {
		return
	}
	if err := CheckReadable(c.root); err != nil {
		c.log.Error("a request got 403 or 404 because http.root cannot be read by this process", "status", status, "root", c.root, "err", err)
	}
}
