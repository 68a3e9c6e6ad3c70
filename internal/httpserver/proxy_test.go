package httpserver

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
)

func TestClientInfo(t *testing.T) {
	prefixes := func(ss ...string) []netip.Prefix {
		var ps []netip.Prefix
		for _, s := range ss {
			ps = append(ps, netip.MustParsePrefix(s))
		}
		return ps
	}
	lan := prefixes("10.0.0.0/8", "fd00::/8")
	chain := prefixes("10.0.0.0/8", "198.51.100.0/24", "2001:db8:cd::/48")
	loopback := prefixes("127.0.0.1/32", "::1/128")

	type want struct{ addr, port, scheme, host string }
	tests := []struct {
		name    string
		remote  string
		tls     bool
		trusted []netip.Prefix
		headers []string // name, value pairs; repeated names make several lines
		want    want
	}{
		// No trust: the connection's own values, whatever the headers say.
		{"no trusted proxies", "203.0.113.7:5000", false, nil,
			[]string{"X-Forwarded-For", "1.2.3.4", "X-Forwarded-Proto", "https", "X-Forwarded-Host", "evil.example"},
			want{"203.0.113.7", "5000", "http", "site.example"}},
		{"no trusted proxies, TLS", "203.0.113.7:5000", true, nil, nil,
			want{"203.0.113.7", "5000", "https", "site.example"}},
		{"untrusted peer spoofs every header", "203.0.113.7:5000", false, lan,
			[]string{"X-Forwarded-For", "10.0.0.1", "X-Forwarded-Proto", "https", "X-Forwarded-Host", "evil.example",
				"Forwarded", "for=10.0.0.2;proto=https;host=evil.example"},
			want{"203.0.113.7", "5000", "http", "site.example"}},
		{"untrusted peer over TLS claims http", "203.0.113.7:5000", true, lan,
			[]string{"X-Forwarded-Proto", "http"},
			want{"203.0.113.7", "5000", "https", "site.example"}},
		{"trusted peer without headers", "10.0.0.5:5000", false, lan, nil,
			want{"10.0.0.5", "5000", "http", "site.example"}},

		// X-Forwarded-*.
		{"one proxy", "10.0.0.5:5000", false, lan,
			[]string{"X-Forwarded-For", "203.0.113.7", "X-Forwarded-Proto", "https", "X-Forwarded-Host", "www.example.com"},
			want{"203.0.113.7", "", "https", "www.example.com"}},
		{"client prepends a spoofed address", "10.0.0.5:5000", false, lan,
			[]string{"X-Forwarded-For", "10.9.9.9, 203.0.113.7"},
			want{"203.0.113.7", "", "http", "site.example"}},
		{"client prepends a trusted-looking chain", "10.0.0.5:5000", false, lan,
			[]string{"X-Forwarded-For", "1.1.1.1, 10.1.1.1, 203.0.113.7"},
			want{"203.0.113.7", "", "http", "site.example"}},
		{"chain of trusted proxies", "10.0.0.5:5000", false, chain,
			[]string{"X-Forwarded-For", "203.0.113.7, 198.51.100.2"},
			want{"203.0.113.7", "", "http", "site.example"}},
		{"chain, only the nearest trusted", "10.0.0.5:5000", false, lan,
			[]string{"X-Forwarded-For", "203.0.113.7, 198.51.100.2"},
			want{"198.51.100.2", "", "http", "site.example"}},
		{"every hop trusted: the leftmost", "10.0.0.5:5000", false, lan,
			[]string{"X-Forwarded-For", "10.3.3.3, 10.2.2.2"},
			want{"10.3.3.3", "", "http", "site.example"}},
		{"several header lines join in order", "10.0.0.5:5000", false, chain,
			[]string{"X-Forwarded-For", "9.9.9.9, 203.0.113.7", "X-Forwarded-For", "198.51.100.2"},
			want{"203.0.113.7", "", "http", "site.example"}},
		{"per-hop proto and host line up with the client", "10.0.0.5:5000", false, chain,
			[]string{"X-Forwarded-For", "203.0.113.7, 198.51.100.2", "X-Forwarded-Proto", "https, http",
				"X-Forwarded-Host", "www.example.com, origin.internal"},
			want{"203.0.113.7", "", "https", "www.example.com"}},
		{"per-hop proto when the walk stops early", "10.0.0.5:5000", false, lan,
			[]string{"X-Forwarded-For", "203.0.113.7, 198.51.100.2", "X-Forwarded-Proto", "https, http"},
			want{"198.51.100.2", "", "http", "site.example"}},
		{"a single proto is the nearest proxy's", "10.0.0.5:5000", false, chain,
			[]string{"X-Forwarded-For", "203.0.113.7, 198.51.100.2", "X-Forwarded-Proto", "https"},
			want{"203.0.113.7", "", "https", "site.example"}},
		{"mismatched counts: the rightmost proto", "10.0.0.5:5000", false, chain,
			[]string{"X-Forwarded-For", "203.0.113.7, 198.51.100.2, 10.1.1.1", "X-Forwarded-Proto", "http, https"},
			want{"203.0.113.7", "", "https", "site.example"}},
		{"proto and host without an address", "10.0.0.5:5000", true, lan,
			[]string{"X-Forwarded-Proto", "http", "X-Forwarded-Host", "www.example.com:8443"},
			want{"10.0.0.5", "5000", "http", "www.example.com:8443"}},
		{"proto is case-insensitive", "10.0.0.5:5000", false, lan,
			[]string{"X-Forwarded-For", "203.0.113.7", "X-Forwarded-Proto", "HTTPS"},
			want{"203.0.113.7", "", "https", "site.example"}},
		{"client address with a port", "10.0.0.5:5000", false, lan,
			[]string{"X-Forwarded-For", "203.0.113.7:41234"},
			want{"203.0.113.7", "41234", "http", "site.example"}},

		// IPv6.
		{"IPv6 peer and client", "[fd00::5]:5000", false, lan,
			[]string{"X-Forwarded-For", "2001:db8::7"},
			want{"2001:db8::7", "", "http", "site.example"}},
		{"IPv6 client in brackets with a port", "[fd00::5]:5000", false, lan,
			[]string{"X-Forwarded-For", "[2001:db8::7]:443"},
			want{"2001:db8::7", "443", "http", "site.example"}},
		{"IPv6 client in brackets", "[fd00::5]:5000", false, lan,
			[]string{"X-Forwarded-For", "[2001:db8::7]"},
			want{"2001:db8::7", "", "http", "site.example"}},
		{"IPv4-mapped peer matches an IPv4 prefix", "[::ffff:10.0.0.5]:5000", false, lan,
			[]string{"X-Forwarded-For", "203.0.113.7"},
			want{"203.0.113.7", "", "http", "site.example"}},
		{"IPv4-mapped client is unmapped", "10.0.0.5:5000", false, lan,
			[]string{"X-Forwarded-For", "::ffff:203.0.113.7"},
			want{"203.0.113.7", "", "http", "site.example"}},
		{"IPv6 chain through a trusted CDN", "10.0.0.5:5000", false, chain,
			[]string{"X-Forwarded-For", "2001:db8::7, 2001:db8:cd::1"},
			want{"2001:db8::7", "", "http", "site.example"}},
		{"loopback proxy", "127.0.0.1:5000", false, loopback,
			[]string{"X-Forwarded-For", "203.0.113.7"},
			want{"203.0.113.7", "", "http", "site.example"}},
		{"IPv6 loopback proxy", "[::1]:5000", false, loopback,
			[]string{"X-Forwarded-For", "203.0.113.7"},
			want{"203.0.113.7", "", "http", "site.example"}},

		// Malformed values.
		{"garbage address stops the walk at the peer", "10.0.0.5:5000", false, lan,
			[]string{"X-Forwarded-For", "not-an-ip"},
			want{"10.0.0.5", "5000", "http", "site.example"}},
		{"garbage left of the client is never reached", "10.0.0.5:5000", false, lan,
			[]string{"X-Forwarded-For", "<script>, 203.0.113.7"},
			want{"203.0.113.7", "", "http", "site.example"}},
		{"garbage inside the trusted part stops at the last good hop", "10.0.0.5:5000", false, lan,
			[]string{"X-Forwarded-For", "203.0.113.7, bogus, 10.1.1.1"},
			want{"10.1.1.1", "", "http", "site.example"}},
		{"empty items are skipped", "10.0.0.5:5000", false, lan,
			[]string{"X-Forwarded-For", " , 203.0.113.7 ,, "},
			want{"203.0.113.7", "", "http", "site.example"}},
		{"empty header", "10.0.0.5:5000", false, lan,
			[]string{"X-Forwarded-For", ""},
			want{"10.0.0.5", "5000", "http", "site.example"}},
		{"zone in a forwarded address is refused", "10.0.0.5:5000", false, lan,
			[]string{"X-Forwarded-For", "fe80::1%eth0"},
			want{"10.0.0.5", "5000", "http", "site.example"}},
		{"port out of range", "10.0.0.5:5000", false, lan,
			[]string{"X-Forwarded-For", "203.0.113.7:99999"},
			want{"10.0.0.5", "5000", "http", "site.example"}},
		{"unknown scheme ignored", "10.0.0.5:5000", true, lan,
			[]string{"X-Forwarded-For", "203.0.113.7", "X-Forwarded-Proto", "javascript"},
			want{"203.0.113.7", "", "https", "site.example"}},
		{"host with a path ignored", "10.0.0.5:5000", false, lan,
			[]string{"X-Forwarded-For", "203.0.113.7", "X-Forwarded-Host", "evil.example/x"},
			want{"203.0.113.7", "", "http", "site.example"}},
		{"host with spaces ignored", "10.0.0.5:5000", false, lan,
			[]string{"X-Forwarded-Host", "a b"},
			want{"10.0.0.5", "5000", "http", "site.example"}},
		{"host with an empty port ignored", "10.0.0.5:5000", false, lan,
			[]string{"X-Forwarded-Host", "www.example.com:"},
			want{"10.0.0.5", "5000", "http", "site.example"}},
		{"IPv6 host accepted", "10.0.0.5:5000", false, lan,
			[]string{"X-Forwarded-Host", "[2001:db8::1]:8443"},
			want{"10.0.0.5", "5000", "http", "[2001:db8::1]:8443"}},
		{"bad IPv6 host ignored", "10.0.0.5:5000", false, lan,
			[]string{"X-Forwarded-Host", "[not-v6]"},
			want{"10.0.0.5", "5000", "http", "site.example"}},
		{"unparsable RemoteAddr", "@", false, lan,
			[]string{"X-Forwarded-For", "203.0.113.7"},
			want{"", "", "http", "site.example"}},
		{"RemoteAddr that is not an IP", "peer.local:80", false, lan,
			[]string{"X-Forwarded-For", "203.0.113.7"},
			want{"peer.local", "80", "http", "site.example"}},

		// RFC 7239 Forwarded.
		{"Forwarded", "10.0.0.5:5000", false, lan,
			[]string{"Forwarded", "for=203.0.113.7;proto=https;host=www.example.com"},
			want{"203.0.113.7", "", "https", "www.example.com"}},
		{"Forwarded, quoted IPv6 with a port", "10.0.0.5:5000", false, lan,
			[]string{"Forwarded", `for="[2001:db8:cafe::17]:4711";proto=https`},
			want{"2001:db8:cafe::17", "4711", "https", "site.example"}},
		{"Forwarded, names and values case-insensitive where they should be", "10.0.0.5:5000", false, lan,
			[]string{"Forwarded", "For=203.0.113.7; Proto=HTTPS"},
			want{"203.0.113.7", "", "https", "site.example"}},
		{"Forwarded chain, spoofed element on the left", "10.0.0.5:5000", false, lan,
			[]string{"Forwarded", "for=10.1.1.1;host=evil.example, for=203.0.113.7;proto=https;host=www.example.com"},
			want{"203.0.113.7", "", "https", "www.example.com"}},
		{"Forwarded chain through a trusted CDN, per-hop values", "10.0.0.5:5000", false, chain,
			[]string{"Forwarded", "for=203.0.113.7;proto=https;host=www.example.com", "Forwarded", "for=198.51.100.2;proto=http;host=origin.internal"},
			want{"203.0.113.7", "", "https", "www.example.com"}},
		{"Forwarded unknown stops the walk", "10.0.0.5:5000", false, lan,
			[]string{"Forwarded", "for=unknown;proto=https"},
			want{"10.0.0.5", "5000", "https", "site.example"}},
		{"Forwarded obfuscated identifier stops the walk", "10.0.0.5:5000", false, chain,
			[]string{"Forwarded", "for=_hidden, for=198.51.100.2"},
			want{"198.51.100.2", "", "http", "site.example"}},
		{"Forwarded with a quoted comma", "10.0.0.5:5000", false, lan,
			[]string{"Forwarded", `for=203.0.113.7;host="a,b"`},
			want{"203.0.113.7", "", "http", "site.example"}},
		{"Forwarded without for", "10.0.0.5:5000", false, lan,
			[]string{"Forwarded", "proto=https;host=www.example.com"},
			want{"10.0.0.5", "5000", "https", "www.example.com"}},
		{"Forwarded pair without a value", "10.0.0.5:5000", false, lan,
			[]string{"Forwarded", "for;for=203.0.113.7"},
			want{"203.0.113.7", "", "http", "site.example"}},
		{"Forwarded from an untrusted peer", "203.0.113.9:5000", false, lan,
			[]string{"Forwarded", "for=203.0.113.7;proto=https"},
			want{"203.0.113.9", "5000", "http", "site.example"}},
		{"X-Forwarded-For wins over Forwarded", "10.0.0.5:5000", false, lan,
			[]string{"X-Forwarded-For", "203.0.113.7", "Forwarded", "for=198.51.100.66;proto=https"},
			want{"203.0.113.7", "", "http", "site.example"}},
		{"Forwarded unquoted IPv6 is malformed", "10.0.0.5:5000", false, lan,
			[]string{"Forwarded", "for=[2001:db8::1]:80:90"},
			want{"10.0.0.5", "5000", "http", "site.example"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := http.NewRequest("GET", "http://site.example/", nil)
			if err != nil {
				t.Fatal(err)
			}
			r.RemoteAddr = tt.remote
			if tt.tls {
				r.TLS = &tls.ConnectionState{}
			}
			for i := 0; i+1 < len(tt.headers); i += 2 {
				r.Header.Add(tt.headers[i], tt.headers[i+1])
			}
			var got want
			got.addr, got.port, got.scheme, got.host = clientInfo(r, tt.trusted)
			if got != tt.want {
				t.Errorf("clientInfo = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestSplitList(t *testing.T) {
	got := splitList([]string{`a, "b,c" ,d`, ``, `e\,f`, `"x\"y,z"`})
	want := []string{`a`, `"b,c"`, `d`, `e\`, `f`, `"x\"y,z"`}
	if len(got) != len(want) {
		t.Fatalf("splitList = %q, want %q", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("splitList = %q, want %q", got, want)
		}
	}
	if u := unquote(`"x\"y"`); u != `x"y` {
		t.Errorf("unquote = %q", u)
	}
}

func BenchmarkClientInfo(b *testing.B) {
	r, _ := http.NewRequest("GET", "http://site.example/", nil)
	r.RemoteAddr = "10.0.0.5:5000"
	r.Header.Set("X-Forwarded-For", "203.0.113.7, 10.1.1.1")
	r.Header.Set("X-Forwarded-Proto", "https")
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for b.Loop() {
		clientInfo(r, trusted)
	}
}

// FuzzClientInfo checks properties of clientInfo on arbitrary headers: the address is the peer's
// or a valid IP address, the scheme is http or https, the host is the request's or a valid one,
// and from an untrusted peer nothing changes.
func FuzzClientInfo(f *testing.F) {
	f.Add("10.0.0.5:5000", "203.0.113.7, 10.1.1.1", "https, http", "www.example.com", "")
	f.Add("[fd00::5]:5000", "", "", "", `for="[2001:db8::1]:80";proto=https;host=a.example, for=unknown`)
	f.Add("203.0.113.9:1", "10.0.0.1", "https", "evil.example", "for=10.0.0.2")
	f.Add("10.0.0.5:5000", `"a,b", [::1]:0, ::ffff:10.0.0.1`, ",,", "[::1]:99999", `for="\"`)
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	f.Fuzz(func(t *testing.T, remote, xff, xfp, xfh, fwd string) {
		r := &http.Request{RemoteAddr: remote, Host: "site.example", Header: http.Header{}}
		for name, v := range map[string]string{"X-Forwarded-For": xff, "X-Forwarded-Proto": xfp, "X-Forwarded-Host": xfh, "Forwarded": fwd} {
			if v != "" {
				r.Header.Set(name, v)
			}
		}
		addr, port, scheme, host := clientInfo(r, trusted)
		peer, peerPort, _ := net.SplitHostPort(remote)
		if addr != peer {
			if a, err := netip.ParseAddr(addr); err != nil || a.Zone() != "" || a.Is4In6() {
				t.Errorf("address %q is neither the peer's nor a plain IP address", addr)
			}
		}
		if port != peerPort && port != "" {
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				t.Errorf("port %q", port)
			}
		}
		if scheme != "http" && scheme != "https" {
			t.Errorf("scheme %q", scheme)
		}
		if host != r.Host && parseHost(host) != host {
			t.Errorf("host %q", host)
		}
		if p, err := netip.ParseAddr(peer); err != nil || !isTrusted(p, trusted) {
			if addr != peer || port != peerPort || scheme != "http" || host != r.Host {
				t.Errorf("an untrusted peer %q changed what PHP sees: %q %q %q %q", remote, addr, port, scheme, host)
			}
		}
	})
}
