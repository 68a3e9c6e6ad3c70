package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// ErrUnreachable is returned, wrapped, by Client methods when nothing accepts a connection at
// the admin address: most often the server is not running, or runs with another config.
var ErrUnreachable = errors.New("no server answers")

// ErrUnauthorized is returned, wrapped, by Client methods when the server wants a token
// (admin.token) that the client did not send or that does not match.
var ErrUnauthorized = errors.New("the admin token is missing or wrong")

// Client talks to a running server's admin listener. Its methods are bounded by their ctx only,
// apart from connecting, which gives up after 5 seconds.
type Client struct {
	addr  string // as configured, for messages
	base  string // http://host:port
	hc    *http.Client
	token string
}

// WithToken makes c send "Authorization: Bearer token" (admin.token) with every request; an
// empty token sends none. It returns c.
func (c *Client) WithToken(token string) *Client {
	c.token = token
	return c
}

// NewClient returns a client for the admin listener configured at addr (admin.address). A
// wildcard host (":9180", "0.0.0.0:9180", "[::]:9180") is reached on loopback.
func NewClient(addr string) (*Client, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("admin address %q: %w", addr, err)
	}
	if port == "0" {
		return nil, fmt.Errorf("admin address %s has port 0, so the running server picked a port at random: give it a fixed port", addr)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	tr := &http.Transport{
		Proxy:       nil, // the admin listener is always reached directly
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}
	return &Client{addr: addr, base: "http://" + net.JoinHostPort(host, port), hc: &http.Client{Transport: tr}}, nil
}

// Workers returns the running server's worker slots (GET /workers).
func (c *Client) Workers(ctx context.Context) ([]Worker, error) {
	var ws []Worker
	err := c.call(ctx, http.MethodGet, "/workers", &ws)
	return ws, err
}

// Reset replaces every worker of the running server, like SIGHUP, and returns when all are
// replaced (POST /reset). Cancelling ctx makes the server stop after the worker it is replacing.
func (c *Client) Reset(ctx context.Context) (ResetResult, error) {
	var r ResetResult
	err := c.call(ctx, http.MethodPost, "/reset", &r)
	return r, err
}

func (c *Client) call(ctx context.Context, method, path string, out any) error {
	return c.callBody(ctx, method, path, nil, out)
}

// callBody is call with a JSON request body (none when reqBody is nil).
func (c *Client) callBody(ctx context.Context, method, path string, reqBody io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, reqBody)
	if err != nil {
		return err
	}
	if reqBody != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" {
			return fmt.Errorf("%w at %s: %w", ErrUnreachable, c.addr, op)
		}
		return fmt.Errorf("%s %s: %w", method, c.base+path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read the answer: %w", method, c.base+path, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(string(body))
		var e errorBody
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		if len(msg) > 500 {
			msg = msg[:500] + "..."
		}
		if resp.StatusCode == http.StatusUnauthorized {
			return fmt.Errorf("%w: the server at %s answered %s: %s", ErrUnauthorized, c.addr, resp.Status, msg)
		}
		return fmt.Errorf("the server at %s answered %s: %s", c.addr, resp.Status, msg)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("unexpected answer from %s%s (is it Peregrine's admin listener?): %w", c.addr, path, err)
	}
	return nil
}

// WriteTable writes ws as the aligned table peregrine workers prints:
//
//	SLOT  PID    STATE  REQUESTS  RSS       UPTIME  CURRENT
//	1     41822  busy   1024      31.2 MiB  2h14m   1.25s
//
// When some workers belong to another group (Worker.Group), a GROUP column comes first, "http"
// for the server's own workers.
func WriteTable(w io.Writer, ws []Worker) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	grouped := slices.ContainsFunc(ws, func(wk Worker) bool { return wk.Group != "" })
	if grouped {
		fmt.Fprint(tw, "GROUP\t")
	}
	fmt.Fprintln(tw, "SLOT\tPID\tSTATE\tREQUESTS\tRSS\tUPTIME\tCURRENT")
	for _, wk := range ws {
		if grouped {
			fmt.Fprint(tw, cmp.Or(wk.Group, "http")+"\t")
		}
		pid := "-"
		if wk.PID > 0 {
			pid = strconv.Itoa(wk.PID)
		}
		uptime := "-"
		if !wk.Started.IsZero() {
			uptime = formatUptime(seconds(wk.UptimeSeconds))
		}
		current := "-"
		if wk.BusySeconds > 0 {
			current = formatAge(seconds(wk.BusySeconds))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\n", wk.Slot, pid, wk.State, wk.Requests, formatBytes(wk.RSSBytes), uptime, current)
	}
	return tw.Flush()
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// formatBytes writes n in binary units with one decimal, "-" for 0 (unknown).
func formatBytes(n int64) string {
	if n <= 0 {
		return "-"
	}
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	v, unit := float64(n)/1024, "KiB"
	for _, u := range []string{"MiB", "GiB", "TiB"} {
		if v < 1024 {
			break
		}
		v, unit = v/1024, u
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + unit
}

// formatUptime writes d with its two largest units: 42s, 3m12s, 5h03m, 2d04h.
func formatUptime(d time.Duration) string {
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
}

// formatAge writes the age of a running request: 340ms, 1.25s, 1m30s.
func formatAge(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
