package compress

import (
	"strconv"
	"strings"
)

// Negotiate returns the content coding to answer with, chosen from offered (the server's codings,
// in its order of preference) by an Accept-Encoding header value; "" means identity, no coding.
//
// Each offered coding gets the q-value the header gives it by name, or failing that the one of
// "*", or 0 when neither is listed (RFC 9110, section 12.5.3); "x-gzip" counts as "gzip". The
// coding with the highest q-value above 0 wins, and among equals the one offered first. An empty
// header, or one that accepts nothing offered, gives "". Names are matched case-insensitively;
// a malformed q-value counts as 0.
func Negotiate(acceptEncoding string, offered []string) string {
	if acceptEncoding == "" || len(offered) == 0 {
		return ""
	}
	best, bestQ := "", 0.0
	for _, coding := range offered {
		q, star := -1.0, -1.0
		for rest := acceptEncoding; rest != ""; {
			var item string
			item, rest, _ = strings.Cut(rest, ",")
			name, params, _ := strings.Cut(item, ";")
			name = strings.TrimSpace(name)
			v := qValue(params)
			switch {
			case strings.EqualFold(name, coding),
				coding == "gzip" && strings.EqualFold(name, "x-gzip"):
				if v > q {
					q = v
				}
			case name == "*":
				star = v
			}
		}
		if q < 0 {
			q = star
		}
		if q > bestQ {
			best, bestQ = coding, q
		}
	}
	return best
}

// qValue returns the q parameter in params (";q=0.5;..."), 1 when absent, 0 when malformed.
func qValue(params string) float64 {
	for params != "" {
		var p string
		p, params, _ = strings.Cut(params, ";")
		name, value, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(name), "q") {
			continue
		}
		q, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil || q < 0 || q > 1 {
			return 0
		}
		return q
	}
	return 1
}
