package daemon

import (
	"github.com/peregrinephp/peregrine/internal/config"
	"github.com/peregrinephp/peregrine/internal/httpserver"
)

// tlsOptions returns the HTTPS options of the public listener from the http.tls section, or nil
// when it serves cleartext.
func tlsOptions(h config.HTTP) *httpserver.TLSOptions {
	t := h.TLS
	if !t.Enabled() {
		return nil
	}
	opts := &httpserver.TLSOptions{CertFile: t.Cert, KeyFile: t.Key, RedirectAddress: t.RedirectAddress}
	if a := t.ACME; a.Enabled() {
		opts.ACME = httpserver.ACMEOptions{
			Email:      a.Email,
			Domains:    a.Domains,
			CA:         a.CA,
			CARootFile: a.CARoot,
			Storage:    a.ResolvedStorage(),
		}
	}
	return opts
}
