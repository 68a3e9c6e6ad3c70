package httpserver

import (
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// Trusted proxies (http.trusted_proxies).
//
// When Peregrine sits behind a load balancer or a CDN, the peer of every connection is the proxy,
// and the client's address, scheme and host arrive in headers the proxy adds. clientInfo believes
// those headers only from a peer inside one of the trusted prefixes, as nginx's realip module does
// with real_ip_recursive on:
//
//	client 203.0.113.7 --> CDN 198.51.100.2 --> LB 10.0.0.5 --> peregrine
//	X-Forwarded-For: 203.0.113.7, 198.51.100.2          (peer: 10.0.0.5)
//
// The addresses are walked from the right, starting with the peer: as long as the address at hand
// is trusted, the next one to the left replaces it. The first untrusted address is the client
// (203.0.113.7 above if 198.51.100.2 and 10.0.0.0/8 are trusted; 198.51.100.2 if only 10.0.0.0/8
// is). Whatever a client writes to the left of the first untrusted hop is never reached, so a
// client cannot spoof its address by sending the header itself. When every address is trusted,
// the leftmost one is the client. A malformed address (or the "unknown" and obfuscated
// identifiers of RFC 7239) stops the walk at the last good one.
//
// The scheme and host are the ones the client used with the first proxy: X-Forwarded-Proto and
// X-Forwarded-Host (or proto= and host= in Forwarded) at the same hop as the client's address
// when each proxy appended one value per hop; otherwise the rightmost value, the one the nearest
// proxy set. A scheme other than http or https, or a host that is not a valid Host header, is
// ignored.
//
// X-Forwarded-For and friends are the de facto standard that nearly every proxy sets; the
// Forwarded header (RFC 7239) is read only when the request has no X-Forwarded-For, so that a
// client cannot use the header a proxy does not maintain to forge its address.
//
// From a peer that is not trusted, every one of these headers is ignored: PHP sees the peer's
// address, the connection's scheme and the Host header. Like nginx, Peregrine does not remove
// them from the headers PHP receives; an application must not believe them itself (configure
// no trusted proxies in the framework: Peregrine has already resolved them).

// clientInfo returns the client address and port, scheme and host of r as PHP should see them,
// believing the proxy headers of r only when its peer is in trusted (see above). remotePort is
// empty when a proxy named the client without a port. A nil or empty trusted list gives the
// connection's own values, as does a RemoteAddr that is not an IP address and port.
func clientInfo(r *http.Request, trusted []netip.Prefix) (remoteAddr, remotePort, scheme, host string) {
	remoteAddr, remotePort, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		remoteAddr, remotePort = "", ""
	}
	scheme, host = "http", r.Host
	if r.TLS != nil {
		scheme = "https"
	}
	if len(trusted) == 0 || err != nil {
		return remoteAddr, remotePort, scheme, host
	}
	peer, err := netip.ParseAddr(remoteAddr)
	if err != nil || !isTrusted(peer, trusted) {
		return remoteAddr, remotePort, scheme, host
	}

	var hops []hop
	if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
		hops = forwardedFor(xff, r.Header.Values("X-Forwarded-Proto"), r.Header.Values("X-Forwarded-Host"))
	} else if fwd := r.Header.Values("Forwarded"); len(fwd) > 0 {
		hops = forwarded(fwd)
	} else {
		hops = forwardedFor(nil, r.Header.Values("X-Forwarded-Proto"), r.Header.Values("X-Forwarded-Host"))
	}

	// Walk from the right. i is the hop whose address is the client; len(hops) stands for the
	// peer itself.
	i := len(hops)
	for i > 0 {
		h := hops[i-1]
		if !h.addr.IsValid() {
			break
		}
		i--
		remoteAddr, remotePort = h.addr.String(), h.port
		if !isTrusted(h.addr, trusted) {
			break
		}
	}
	if s := hopValue(hops, i, func(h hop) string { return h.proto }); s != "" {
		scheme = s
	}
	if s := hopValue(hops, i, func(h hop) string { return h.host }); s != "" {
		host = s
	}
	return remoteAddr, remotePort, scheme, host
}

// hop is what one proxy said about the connection it received: the address and port of its
// client (addr is invalid when missing or malformed), and the scheme and Host header the client
// used, each empty when the proxy did not say or said something invalid.
type hop struct {
	addr        netip.Addr
	port        string
	proto, host string
}

// hopValue returns the value at hop i, or failing that the nearest one to its right. When the
// client is the peer itself (i == len(hops)), it is the rightmost hop's: the nearest proxy's.
func hopValue(hops []hop, i int, get func(hop) string) string {
	for j := min(i, len(hops)-1); j >= 0 && j < len(hops); j++ {
		if s := get(hops[j]); s != "" {
			return s
		}
	}
	return ""
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	a = a.Unmap().WithZone("")
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwardedFor reads X-Forwarded-For, -Proto and -Host (each a comma-separated list, possibly
// over several header lines) into hops. Proto and host values line up with the addresses when
// there are as many; otherwise only the rightmost one counts, and it is the nearest proxy's. With
// no addresses, a single hop without one carries the nearest proxy's proto and host.
func forwardedFor(xff, xfp, xfh []string) []hop {
	addrs, protos, hosts := splitList(xff), splitList(xfp), splitList(xfh)
	n := max(len(addrs), 1)
	hops := make([]hop, n)
	for k, s := range addrs {
		hops[k].addr, hops[k].port = parseNode(s)
	}
	align := func(values []string, set func(h *hop, v string)) {
		switch {
		case len(values) == n:
			for k, v := range values {
				set(&hops[k], v)
			}
		case len(values) > 0:
			set(&hops[n-1], values[len(values)-1])
		}
	}
	align(protos, func(h *hop, v string) { h.proto = parseProto(v) })
	align(hosts, func(h *hop, v string) { h.host = parseHost(v) })
	return hops
}

// forwarded reads RFC 7239 Forwarded headers into hops, one per element.
func forwarded(lines []string) []hop {
	var hops []hop
	for _, elem := range splitList(lines) {
		var h hop
		for pair := range strings.SplitSeq(elem, ";") {
			name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
			if !ok {
				continue
			}
			value = unquote(strings.TrimSpace(value))
			switch strings.ToLower(strings.TrimSpace(name)) {
			case "for":
				h.addr, h.port = parseNode(value)
			case "proto":
				h.proto = parseProto(value)
			case "host":
				h.host = parseHost(value)
			}
		}
		hops = append(hops, h)
	}
	return hops
}

// splitList splits comma-separated header lines into trimmed, non-empty items, in order. Commas
// inside double quotes (allowed in Forwarded values) do not split.
func splitList(lines []string) []string {
	var items []string
	for _, line := range lines {
		start, quoted := 0, false
		for k := 0; k <= len(line); k++ {
			if k < len(line) {
				switch line[k] {
				case '"':
					quoted = !quoted
					continue
				case '\\':
					if quoted {
						k++
					}
					continue
				case ',':
					if quoted {
						continue
					}
				default:
					continue
				}
			}
			if item := strings.TrimSpace(line[start:min(k, len(line))]); item != "" {
				items = append(items, item)
			}
			start = k + 1
		}
	}
	return items
}

// unquote removes the double quotes around an RFC 7230 quoted-string and its backslash escapes;
// anything else is returned as is.
func unquote(s string) string {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return s
	}
	s = s[1 : len(s)-1]
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for k := 0; k < len(s); k++ {
		if s[k] == '\\' && k+1 < len(s) {
			k++
		}
		b.WriteByte(s[k])
	}
	return b.String()
}

// parseNode parses a client address as proxies write it: 192.0.2.1, 192.0.2.1:4711, 2001:db8::1,
// [2001:db8::1] or [2001:db8::1]:4711. Anything else (unknown, _hidden, a name) gives an
// invalid address. IPv4-mapped IPv6 addresses are unmapped.
func parseNode(s string) (netip.Addr, string) {
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return a.Unmap(), ""
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() && a.Zone() == "" {
			return a.Unmap(), ""
		}
		return netip.Addr{}, ""
	}
	if ap, err := netip.ParseAddrPort(s); err == nil && ap.Addr().Zone() == "" {
		if ap.Port() == 0 {
			return ap.Addr().Unmap(), ""
		}
		return ap.Addr().Unmap(), strconv.Itoa(int(ap.Port()))
	}
	return netip.Addr{}, ""
}

// parseProto returns http or https, or "" for anything else.
func parseProto(s string) string {
	switch strings.ToLower(s) {
	case "http":
		return "http"
	case "https":
		return "https"
	}
	return ""
}

// parseHost returns s if it is a plausible Host header value (a name or address, an optional
// port), or "".
func parseHost(s string) string {
	if s == "" || len(s) > 255 {
		return ""
	}
	name, port := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return ""
		}
		if a, err := netip.ParseAddr(s[1:end]); err != nil || !a.Is6() || a.Zone() != "" {
			return ""
		}
		name, port = "", s[end+1:]
		if port != "" {
			if port[0] != ':' {
				return ""
			}
			port = port[1:]
			if port == "" {
				return ""
			}
		}
	} else if k := strings.IndexByte(s, ':'); k >= 0 {
		name, port = s[:k], s[k+1:]
		if port == "" {
			return ""
		}
	}
	for k := 0; k < len(port); k++ {
		if port[k] < '0' || port[k] > '9' || k >= 5 {
			return ""
		}
	}
	for k := 0; k < len(name); k++ {
		c := name[k]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_') {
			return ""
		}
	}
	return s
}
