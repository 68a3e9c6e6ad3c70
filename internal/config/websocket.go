package config

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// WebSocket configures the WebSocket connections and channels the server holds for PHP (the
// websocket section; docs/websocket.md). Worker mode only: classic mode refuses the section.
type WebSocket struct {
	// MaxMessageSize is the largest message a client may send; a larger one closes the
	// connection with 1009. Must be positive. Default 1MiB.
	MaxMessageSize Size `yaml:"max_message_size"`

	// PingInterval is how often the server pings each connection; a peer silent for two
	// intervals is closed (1006). Must be positive. Default 30s.
	PingInterval Duration `yaml:"ping_interval"`

	// SendQueue is how much one connection may have waiting to be sent; beyond it the client
	// is not reading, and its connection is closed with 1008. Must be positive. Default 1MiB.
	SendQueue Size `yaml:"send_queue"`

	// AllowedOrigins are the Origin values accepted besides the request's own host (a full
	// origin, https://app.example, or a host, app.example); ["*"] accepts any. A browser's
	// upgrade from any other origin gets 403 before PHP runs. Default none.
	AllowedOrigins []string `yaml:"allowed_origins"`

	// Broker carries publishes and sends between the servers that share it: "" keeps them on
	// this server, redis://HOST:PORT uses Redis pub/sub, nats://HOST:PORT NATS core subjects.
	// At most once either way. Default "".
	Broker string `yaml:"broker"`

	// MaxConnections caps the open WebSocket connections and event-stream subscribers
	// together, below http.max_connections, which counts them too; at the cap an upgrade or a
	// subscription gets 503. 0 means no cap of its own. Default 0.
	// An addition to the documented interface.
	MaxConnections int `yaml:"max_connections"`
}

// defaultWebSocket returns the websocket section's defaults.
func defaultWebSocket() WebSocket {
	return WebSocket{MaxMessageSize: MiB, PingInterval: Duration(30 * time.Second), SendQueue: MiB}
}

// websocketKeys binds the websocket section's keys.
func websocketKeys(ws *WebSocket) []key {
	return []key{
		sizeKey("max_message_size", &ws.MaxMessageSize),
		durationKey("ping_interval", &ws.PingInterval),
		sizeKey("send_queue", &ws.SendQueue),
		listKey("allowed_origins", &ws.AllowedOrigins),
		stringKey("broker", &ws.Broker),
		intKey("max_connections", &ws.MaxConnections),
	}
}

// validateWebSocket checks the websocket section.
func (c *Config) validateWebSocket() []*Error {
	var errs []*Error
	add := func(key, format string, args ...any) {
		errs = append(errs, &Error{Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	ws := &c.WebSocket
	// Classic mode: a section that changes anything is a mistake worth saying.
	def := defaultWebSocket()
	changed := len(ws.AllowedOrigins) > 0 || ws.Broker != "" || ws.MaxConnections != 0 ||
		ws.MaxMessageSize != def.MaxMessageSize || ws.SendQueue != def.SendQueue || ws.PingInterval != def.PingInterval
	if changed && len(c.Workers.Command) == 0 && c.HTTP.Root != "" {
		add("websocket", "WebSockets need worker mode (the server holds the connections and hands their events to a worker script's handler); classic mode runs one script per request and has none: remove the section, or serve a worker script with serve(..., websocket: ...)")
	}
	if ws.MaxMessageSize <= 0 {
		add("websocket.max_message_size", "must be positive, got %s", ws.MaxMessageSize)
	}
	if ws.PingInterval <= 0 {
		add("websocket.ping_interval", "must be positive, got %s", ws.PingInterval)
	}
	if ws.SendQueue <= 0 {
		add("websocket.send_queue", "must be positive, got %s", ws.SendQueue)
	}
	if ws.MaxConnections < 0 {
		add("websocket.max_connections", "cannot be negative, got %d (0: no cap of its own)", ws.MaxConnections)
	}
	if ws.Broker != "" {
		u, err := url.Parse(ws.Broker)
		switch {
		case err != nil:
			add("websocket.broker", "%v", err)
		case u.Scheme != "redis" && u.Scheme != "nats":
			add("websocket.broker", `want "", redis://HOST:PORT or nats://HOST:PORT, got %q`, ws.Broker)
		case u.Host == "":
			add("websocket.broker", "%q names no host", ws.Broker)
		}
	}
	for _, o := range ws.AllowedOrigins {
		if o == "" || (o != "*" && strings.ContainsAny(o, " \t")) {
			add("websocket.allowed_origins", "%q is not an origin (https://host, a host, or *)", o)
		}
	}
	return errs
}
