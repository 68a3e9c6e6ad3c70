package admin

import (
	"crypto/subtle"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// guard refuses the requests the admin listener must never act on, before any route runs:
//
//   - a request a browser marks as cross-origin (Sec-Fetch-Site other than same-origin or none,
//     or an Origin that is not this listener): a web page's form POST or no-cors fetch to
//     /reset gets 403;
//   - with a token, a request without "Authorization: Bearer TOKEN": 401;
//   - without a token, a Host that does not name this machine: 403. A page that rebinds its
//     own DNS name to 127.0.0.1 sends its name as Host, so it cannot read /workers or
//     /metrics. With a token the Host is not checked: a rebinding page cannot know the token,
//     and a remote scraper may use any name of the machine.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if msg := crossOrigin(r); msg != "" {
			text(w, http.StatusForbidden, "forbidden: "+msg)
			return
		}
		if s.token != "" {
			if !bearer(r, s.token) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="peregrine admin"`)
				text(w, http.StatusUnauthorized, "unauthorized: this admin listener needs Authorization: Bearer TOKEN (admin.token)")
				return
			}
		} else if !s.localHost(r.Host) {
			text(w, http.StatusForbidden, "forbidden: Host "+r.Host+" is not this machine's admin listener")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// crossOrigin returns why r comes from another origin, or "" if it does not.
func crossOrigin(r *http.Request) string {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return "a " + site + " request from a web page"
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return ""
	}
	if u, err := url.Parse(origin); err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
		return "a request from the web page at " + origin
	}
	return ""
}

// bearer reports whether r carries "Authorization: Bearer token", comparing in constant time.
func bearer(r *http.Request, token string) bool {
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(token)) == 1
}

// localHost reports whether a Host header names this machine: localhost, a loopback IP, or the
// host the listener was configured with.
func (s *Server) localHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	for _, h := range s.hosts {
		if strings.EqualFold(host, strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")) {
			return true
		}
	}
	return false
}
