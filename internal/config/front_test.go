package config

import (
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestFrontErrors covers the errors of http.trusted_proxies and the http.tls section.
func TestFrontErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want string // the whole first line of the message
	}{
		{"proxy word", "http:\n  trusted_proxies: [10.0.0.0/8, lan]\n",
			`peregrine.yaml:2: http.trusted_proxies[1]: want a CIDR like 10.0.0.0/8 or an address like 10.0.0.1, got "lan"`},
		{"proxy bits", "http:\n  trusted_proxies:\n    - 10.0.0.0/33\n",
			`peregrine.yaml:3: http.trusted_proxies[0]: want a CIDR like 10.0.0.0/8 or an address like 10.0.0.1, got "10.0.0.0/33"`},
		{"proxy zone", "http:\n  trusted_proxies: ['fe80::1%eth0']\n",
			`peregrine.yaml:2: http.trusted_proxies[0]: want a CIDR like 10.0.0.0/8 or an address like 10.0.0.1, got "fe80::1%eth0"`},
		{"tls scalar", "http:\n  tls: on\n", `peregrine.yaml:2: http.tls: want a mapping of keys, got "on"`},
		{"tls unknown key", "http:\n  tls:\n    crt: a.pem\n", `peregrine.yaml:3: http.tls.crt: unknown key (did you mean cert?)`},
		{"acme unknown key", "http:\n  tls:\n    acme:\n      domain: [a.example]\n", `peregrine.yaml:4: http.tls.acme.domain: unknown key (did you mean domains?)`},
		{"acme duplicate", "http:\n  tls:\n    acme:\n      domains: [a.example]\n      email: a@a.example\n      email: b@a.example\n", `peregrine.yaml:6: http.tls.acme.email: set twice (first on line 5)`},
		{"cert without key", "http:\n  tls:\n    cert: a.pem\n", `peregrine.yaml:3: http.tls.cert: set without http.tls.key: give the PEM file of its private key too`},
		{"key without cert", "http:\n  tls:\n    key: a.key\n", `peregrine.yaml:3: http.tls.key: set without http.tls.cert: give the PEM file of the certificate too`},
		{"cert and acme", "http:\n  tls:\n    cert: a.pem\n    key: a.key\n    acme:\n      domains: [a.example]\n",
			`peregrine.yaml:6: http.tls.acme.domains: set with http.tls.cert: take certificates from files or from ACME, not both`},
		{"redirect without tls", "http:\n  tls:\n    redirect_address: :80\n",
			`peregrine.yaml:3: http.tls.redirect_address: set without HTTPS: it redirects to HTTPS, so set http.tls.cert and key or http.tls.acme.domains, or remove it`},
		{"redirect bad", "http:\n  tls:\n    redirect_address: \"80\"\n    cert: a\n    key: b\n",
			`peregrine.yaml:3: http.tls.redirect_address: "80" has no host: write 127.0.0.1:80 for this machine only, or :80 for every interface`},
		{"redirect same", "http:\n  address: :443\n  tls:\n    redirect_address: :443\n    cert: a\n    key: b\n",
			`peregrine.yaml:4: http.tls.redirect_address: the same as http.address: give the redirect listener its own port (usually :80)`},
		{"redirect admin", "admin:\n  address: :9180\nhttp:\n  tls:\n    redirect_address: :9180\n    cert: a\n    key: b\n",
			`peregrine.yaml:5: http.tls.redirect_address: the same as admin.address: give the redirect listener its own port (usually :80)`},
		{"acme without domains", "http:\n  tls:\n    acme:\n      email: a@example.com\n",
			`peregrine.yaml:4: http.tls.acme.email: set without http.tls.acme.domains: list the domains to obtain certificates for`},
		{"acme email", "http:\n  tls:\n    acme:\n      email: admin\n      domains: [a.example]\n",
			`peregrine.yaml:4: http.tls.acme.email: want an address like admin@example.com, got "admin"`},
		{"acme wildcard", "http:\n  tls:\n    acme:\n      domains: ['*.example.com']\n",
			`peregrine.yaml:4: http.tls.acme.domains[0]: "*.example.com": wildcard certificates need the DNS-01 challenge, which Peregrine does not do; list each name`},
		{"acme url domain", "http:\n  tls:\n    acme:\n      domains:\n        - a.example\n        - https://b.example/\n",
			`peregrine.yaml:6: http.tls.acme.domains[1]: want a bare domain name like example.com, without scheme, port or path, got "https://b.example/"`},
		{"acme port domain", "http:\n  tls:\n    acme:\n      domains: [a.example:443]\n",
			`peregrine.yaml:4: http.tls.acme.domains[0]: want a bare domain name like example.com, without scheme, port or path, got "a.example:443"`},
		{"acme empty domain", "http:\n  tls:\n    acme:\n      domains: ['']\n",
			`peregrine.yaml:4: http.tls.acme.domains[0]: empty: give a domain name like example.com`},
		{"acme twice", "http:\n  tls:\n    acme:\n      domains: [a.example, a.example]\n",
			`peregrine.yaml:4: http.tls.acme.domains[1]: "a.example" is listed twice`},
		{"acme ca", "http:\n  tls:\n    acme:\n      domains: [a.example]\n      ca: http://ca.example/dir\n",
			`peregrine.yaml:5: http.tls.acme.ca: want the https:// URL of an ACME directory, e.g. https://acme-staging-v02.api.letsencrypt.org/directory, got "http://ca.example/dir"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse("peregrine.yaml", []byte(tt.src), env(nil))
			if err == nil {
				t.Fatalf("no error for\n%s", tt.src)
			}
			first, _, _ := strings.Cut(err.Error(), "\n")
			if first != tt.want {
				t.Errorf("error for\n%s\n got: %s\nwant: %s", tt.src, first, tt.want)
			}
		})
	}
}

func TestFrontValues(t *testing.T) {
	c := mustParse(t, `http:
  address: :443
  trusted_proxies: 10.0.0.0/8
  tls:
    redirect_address: :80
    acme:
      domains: [example.com]
`, nil)
	if !c.HTTP.TLS.Enabled() || !c.HTTP.TLS.ACME.Enabled() {
		t.Errorf("TLS not enabled by acme.domains: %+v", c.HTTP.TLS)
	}
	if !slices.Equal(c.HTTP.TrustedProxies, []string{"10.0.0.0/8"}) {
		t.Errorf("a single string is a list of one: %q", c.HTTP.TrustedProxies)
	}
	c = mustParse(t, "http:\n  tls:\n    cert: a.pem\n    key: a.key\n", nil)
	if !c.HTTP.TLS.Enabled() || c.HTTP.TLS.ACME.Enabled() {
		t.Errorf("cert and key: %+v", c.HTTP.TLS)
	}
	if mustParse(t, "http:\n  tls:\n", nil).HTTP.TLS.Enabled() {
		t.Error("an empty tls section turns TLS on")
	}
}

func TestTrustedPrefixes(t *testing.T) {
	h := HTTP{TrustedProxies: []string{"10.0.0.0/8", "192.0.2.1", "2001:db8::/32", "::1", "10.1.2.3/8", "::ffff:172.16.0.0/108", "bogus"}}
	var got []string
	for _, p := range h.TrustedPrefixes() {
		got = append(got, p.String())
	}
	want := []string{"10.0.0.0/8", "192.0.2.1/32", "2001:db8::/32", "::1/128", "10.0.0.0/8", "172.16.0.0/12"}
	if !slices.Equal(got, want) {
		t.Errorf("TrustedPrefixes = %q, want %q", got, want)
	}
	if !h.TrustedPrefixes()[5].Contains(netip.MustParseAddr("172.20.0.1")) {
		t.Error("an IPv4-mapped prefix does not match IPv4 addresses")
	}
}

func TestResolvedStorage(t *testing.T) {
	if got := (ACME{Storage: "/srv/certs"}).ResolvedStorage(); got != "/srv/certs" {
		t.Errorf("ResolvedStorage with storage set = %q", got)
	}
	t.Setenv("XDG_DATA_HOME", "/data")
	if got := (ACME{}).ResolvedStorage(); got != "/data/peregrine/certmagic" {
		t.Errorf("ResolvedStorage with XDG_DATA_HOME = %q", got)
	}
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("HOME", "/home/site")
	if got := (ACME{}).ResolvedStorage(); got != filepath.Join("/home/site", ".local/share/peregrine/certmagic") {
		t.Errorf("ResolvedStorage with HOME = %q", got)
	}
}
