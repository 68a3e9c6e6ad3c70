package httpserver

import (
	"net/http"
	"strconv"
	"strings"
)

// Limits bound what a client may send beyond what net/http already bounds: they refuse requests
// that would be costly to hand to PHP. Zero values mean the defaults documented on each field.
//
// PHP turns header, cookie and field names into array keys, and all-digit names that are
// multiples of 2^20 collide in its hash tables: tens of thousands of them cost seconds of worker
// CPU per request. nginx refuses such requests at its header buffers (8 KiB per line); these
// limits do the same before a worker sees anything.
type Limits struct {
	// MaxHeaderCount is the largest number of header fields a request may carry, each value
	// of a repeated header counting once; more get 431. Default 100 (http.max_header_count).
	MaxHeaderCount int

	// MaxHeaderLine is the largest size in bytes of one header field, "Name: value"; a larger one
	// gets 431. Default 8192, nginx's large_client_header_buffers (http.max_header_line).
	MaxHeaderLine int

	// MaxCookies is the largest number of cookies (name=value pairs over every Cookie header)
	// a request may carry; more get 431. Default 1000, PHP's max_input_vars (http.max_cookies).
	MaxCookies int

	// MaxInputVars is the largest number of fields in the query string (more get 400; PHP would
	// drop the extra ones at its own max_input_vars) and of parts in a multipart body the server
	// parses for the cli runtime (more get 413). Form bodies are left to PHP, which keeps the
	// first max_input_vars fields. Default 1000 (http.max_input_vars).
	MaxInputVars int
}

// Defaults of Limits.
const (
	DefaultMaxHeaderCount = 100
	DefaultMaxHeaderLine  = 8 << 10
	DefaultMaxCookies     = 1000
	DefaultMaxInputVars   = 1000
)

// withDefaults returns lim with each zero field set to its default.
func (lim Limits) withDefaults() Limits {
	if lim.MaxHeaderCount <= 0 {
		lim.MaxHeaderCount = DefaultMaxHeaderCount
	}
	if lim.MaxHeaderLine <= 0 {
		lim.MaxHeaderLine = DefaultMaxHeaderLine
	}
	if lim.MaxCookies <= 0 {
		lim.MaxCookies = DefaultMaxCookies
	}
	if lim.MaxInputVars <= 0 {
		lim.MaxInputVars = DefaultMaxInputVars
	}
	return lim
}

// checkRequest refuses a request that breaks one of the limits. It returns 0 for a request
// that may go on, or the status and a message for the client; answer those with refuse, which
// closes the connection. Ambiguous framing (Content-Length with Transfer-Encoding, a folded
// header) never gets here: http1 refuses it as it reads the head, and HTTP/2 has none.
func checkRequest(r *http.Request, lim Limits) (status int, msg string) {
	lim = lim.withDefaults()
	count, cookies := 0, 0
	for name, values := range r.Header {
		count += len(values)
		if count > lim.MaxHeaderCount {
			return http.StatusRequestHeaderFieldsTooLarge, "more than " + strconv.Itoa(lim.MaxHeaderCount) + " header fields (http.max_header_count)"
		}
		for _, v := range values {
			if len(name)+2+len(v) > lim.MaxHeaderLine {
				return http.StatusRequestHeaderFieldsTooLarge, "header " + name + " longer than " + strconv.Itoa(lim.MaxHeaderLine) + " bytes (http.max_header_line)"
			}
		}
		switch name {
		case "Authorization", "Proxy-Authorization":
			if len(values) > 1 {
				// nginx refuses a duplicate Authorization: which one PHP or a proxy believes is
				// a guess.
				return http.StatusBadRequest, "more than one " + name + " header"
			}
		case "Cookie":
			for _, v := range values {
				cookies += countPairs(v, ';')
			}
			if cookies > lim.MaxCookies {
				return http.StatusRequestHeaderFieldsTooLarge, "more than " + strconv.Itoa(lim.MaxCookies) + " cookies (http.max_cookies)"
			}
		}
	}
	if len(r.Host)+len("Host: ") > lim.MaxHeaderLine {
		return http.StatusRequestHeaderFieldsTooLarge, "header Host longer than " + strconv.Itoa(lim.MaxHeaderLine) + " bytes (http.max_header_line)"
	}
	if countPairs(r.URL.RawQuery, '&') > lim.MaxInputVars {
		return http.StatusBadRequest, "more than " + strconv.Itoa(lim.MaxInputVars) + " query string fields (http.max_input_vars)"
	}
	return 0, ""
}

// countPairs counts the non-empty items of s separated by sep, as PHP counts input variables.
func countPairs(s string, sep byte) int {
	n := 0
	for s != "" {
		i := strings.IndexByte(s, sep)
		item := s
		if i >= 0 {
			item, s = s[:i], s[i+1:]
		} else {
			s = ""
		}
		if strings.TrimLeft(item, " \t") != "" {
			n++
		}
	}
	return n
}

// dropHeaders removes the request headers that must never reach PHP: Proxy, which PHP would
// expose as HTTP_PROXY, the variable HTTP clients take for their proxy (httpoxy). PHP-FPM
// behind nginx never sets it. Call it before the request is framed.
func dropHeaders(h http.Header) {
	delete(h, "Proxy")
}

// refuse answers a request checkRequest refused and closes the connection after it: after a
// framing error the rest of the connection cannot be trusted.
func refuse(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Connection", "close")
	httpError(w, status, msg)
}
