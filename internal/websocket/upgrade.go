package websocket

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	gorilla "github.com/gorilla/websocket"

	"github.com/peregrinephp/peregrine/internal/pool"
	"github.com/peregrinephp/peregrine/internal/protocol"
)

// Wants reports whether r asks for a WebSocket (RFC 6455 over HTTP/1.1; HTTP/2's extended
// CONNECT, RFC 8441, is not supported by the library).
func (h *Hub) Wants(r *http.Request) bool {
	return r.ProtoMajor == 1 && gorilla.IsWebSocketUpgrade(r)
}

// Upgrade answers a WebSocket upgrade. req is the request as PHP would see it (its head,
// without a body): it goes to onOpen. An Origin that is neither the request's own host nor
// allowed gets 403 before PHP runs; past the connection cap (event streams count), 503. PHP
// accepts as runOpen says; any other answer, Refused's status included, is sent to the client
// as it is (an application without a WebSocket handler answers the upgrade as any request).
func (h *Hub) Upgrade(w http.ResponseWriter, r *http.Request, req *protocol.Request) {
	c := &conn{h: h, id: h.newID()}
	c.base = *req
	c.base.Headers = nil
	host := r.Host
	for _, f := range req.Headers {
		if f.Name == "host" { // the host PHP sees: a trusted proxy's X-Forwarded-Host, if any
			c.base.Headers, host = []protocol.Field{f}, f.Value
			break
		}
	}
	if !h.originAllowed(r, host) {
		h.stats.refused.Add(1)
		http.Error(w, "WebSocket Origin not allowed (websocket.allowed_origins)", http.StatusForbidden)
		return
	}
	c.base.Params, c.base.Body, c.base.Form, c.base.Files = nil, nil, "", nil
	if err := h.addOpening(c); err != nil {
		h.refuse(w, err)
		return
	}
	// From here the connection counts in h.wg: the reading loop takes the count over once
	// open, or it is given back below. onOpen runs to its end even if the client leaves: an
	// application that pairs onOpen with onClose hears the close (1006) then, not nothing. It
	// is cancelled only when Close gives up waiting.
	handedOver := false
	defer func() {
		if !handedOver {
			h.wg.Done()
		}
	}()
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	defer context.AfterFunc(h.ctx, cancel)()
	accepted, status, body, head, err := c.runOpen(ctx, req)
	if err != nil {
		h.remove(c)
		h.stats.refused.Add(1)
		var pe *pool.Error
		code := http.StatusBadGateway
		if errors.As(err, &pe) {
			code = pe.Status
		}
		if h.ctx.Err() == nil {
			h.log.Warn("onOpen could not run", "id", c.id, "err", err)
		}
		http.Error(w, http.StatusText(code), code)
		return
	}
	if !accepted {
		h.remove(c)
		h.stats.refused.Add(1)
		for _, f := range head {
			w.Header().Add(f.Name, f.Value)
		}
		w.WriteHeader(status)
		_, _ = w.Write(body)
		return
	}
	ws, err := h.up.Upgrade(hijacker(w), r, nil)
	if err != nil { // the client left during onOpen, or its handshake was wrong: gorilla answered
		c.mu.Lock()
		c.done = true
		c.mu.Unlock()
		handedOver = true
		go func() {
			defer h.wg.Done()
			c.end(gorilla.CloseAbnormalClosure, "")
		}()
		return
	}
	// Open, even if the server began stopping during onOpen: its Close has closed c (1001),
	// which goes out now as the first frame, and onClose follows as for any connection.
	h.stats.opened.Add(1)
	c.mu.Lock()
	c.ws, c.open = ws, true
	aborted := c.done     // Close gave up waiting: no closing handshake
	if c.closeCode != 0 { // closed in onOpen, or by a Close meanwhile
		if c.closeCode == gorilla.ClosePolicyViolation {
			c.queue = nil
		}
		c.queue = append(c.queue, outgoing{typ: gorilla.CloseMessage, data: gorilla.FormatCloseMessage(c.closeCode, c.closeReason)})
	}
	c.pinger = time.AfterFunc(h.opts.PingInterval, c.ping)
	c.startWriterLocked()
	c.mu.Unlock()
	if aborted {
		_ = ws.NetConn().Close()
	}
	handedOver = true
	go c.read()
}

// runOpen runs onOpen and applies its reply when PHP accepted: a 200 with the header
// X-Peregrine-WebSocket: accept (the PHP library's answer when onOpen returns; not 101, which
// the native runtime would send as Early Hints).
func (c *conn) runOpen(ctx context.Context, req *protocol.Request) (accepted bool, status int, body []byte, head []protocol.Field, err error) {
	a, err := c.event(ctx, &Event{Kind: KindOpen}, req)
	if err != nil {
		return false, 0, nil, nil, err
	}
	if a.status != http.StatusOK || !slices.ContainsFunc(a.head, func(f protocol.Field) bool {
		return strings.EqualFold(f.Name, acceptHeader) && f.Value == "accept"
	}) {
		return false, a.status, a.body, a.head, nil
	}
	reply, err := DecodeReply(a.body)
	if err != nil {
		return false, 0, nil, nil, err
	}
	c.apply(&reply)
	return true, a.status, nil, nil, nil
}

// acceptHeader, set to "accept" on a 200, is PHP's acceptance of a connection.
const acceptHeader = "X-Peregrine-WebSocket"

// originAllowed reports whether the request's Origin, if any, is its own host or one of
// allowed_origins: a browser always sends Origin, so another site's page cannot open a
// WebSocket with the user's cookies (cross-site WebSocket hijacking). Clients that are not
// browsers send none and pass. host is the request's host as the rest of the front takes it:
// the Host header, or a trusted proxy's X-Forwarded-Host (http.trusted_proxies), which is
// the one the browser's page came from.
func (h *Hub) originAllowed(r *http.Request, host string) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil {
		return false
	}
	if strings.EqualFold(u.Host, host) {
		return true
	}
	for _, a := range h.opts.AllowedOrigins {
		if a == "*" || strings.EqualFold(a, origin) || strings.EqualFold(a, u.Host) {
			return true
		}
	}
	return false
}

// hijacker finds the writer under w's wrappers (compression, counting) that can hand the
// connection over.
func hijacker(w http.ResponseWriter) http.ResponseWriter {
	for {
		if _, ok := w.(http.Hijacker); ok {
			return w
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w
		}
		w = u.Unwrap()
	}
}
