package httpserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// TLSOptions turn the listener into an HTTPS one: certificates from files (CertFile and
// KeyFile) or from an ACME CA (ACME with Domains), not both.
type TLSOptions struct {
	// CertFile and KeyFile are the PEM files of the certificate chain and its private key
	// (http.tls.cert, http.tls.key). Listen reads them, and handshakes read them again when they
	// change (see certFiles).
	CertFile, KeyFile string

	// ACME obtains and renews certificates automatically when its Domains are set.
	ACME ACMEOptions

	// RedirectAddress is the host:port of a cleartext listener that redirects every request to
	// HTTPS and answers ACME HTTP-01 challenges (http.tls.redirect_address); empty means none.
	RedirectAddress string
}

// ACMEOptions configure automatic certificates (http.tls.acme).
type ACMEOptions struct {
	// Email is the account's contact address; optional.
	Email string
	// Domains are the names to get certificates for; none turns ACME off.
	Domains []string
	// CA is the directory URL; empty means Let's Encrypt.
	CA string
	// CARootFile is a PEM file of roots trusted, besides the system's, for talking to the CA.
	CARootFile string
	// Storage is the directory for the account, certificates and keys; it must be set.
	Storage string
}

// certCheckInterval is how often, at most, the certificate files are checked for a change.
const certCheckInterval = time.Second

// certFiles serves the certificate of a PEM certificate file and key file, and loads them again
// when either file's modification time or size changes, so that a renewal by certbot or another
// tool is picked up without a restart. The files are checked at most once per interval, during
// a handshake. A reload that fails (a half-written file, a certificate whose new key is not
// there yet) keeps the previous certificate, is logged, and is tried again at the next check.
type certFiles struct {
	certFile, keyFile string
	interval          time.Duration
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   [2]fileStamp // of certFile and keyFile when cert was loaded
	checked time.Time
	failed  [2]fileStamp // the stamps of the last failed reload, logged once
}

// fileStamp identifies a version of a file.
type fileStamp struct {
	mod  time.Time
	size int64
}

func (c *certFiles) stamps() ([2]fileStamp, error) {
	var s [2]fileStamp
	for i, name := range []string{c.certFile, c.keyFile} {
		fi, err := os.Stat(name)
		if err != nil {
			return s, err
		}
		s[i] = fileStamp{fi.ModTime(), fi.Size()}
	}
	return s, nil
}

// load reads the files; the caller holds mu or has not shared c yet.
func (c *certFiles) load() error {
	s, err := c.stamps()
	if err != nil {
		return err
	}
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return err
	}
	c.cert, c.stamp = &pair, s
	return nil
}

func (c *certFiles) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now(); now.Sub(c.checked) >= c.interval {
		c.checked = now
		if s, err := c.stamps(); err == nil && s != c.stamp {
			if err := c.load(); err == nil {
				c.log.Info("certificate files reloaded", "cert", c.certFile, "key", c.keyFile)
			} else if s != c.failed {
				c.failed = s
				c.log.Error("certificate files changed but do not load; serving the previous certificate",
					"cert", c.certFile, "key", c.keyFile, "err", err)
			}
		}
	}
	return c.cert, nil
}

// acmeManager obtains and renews the certificates of ACMEOptions.Domains with certmagic.
//
// Its life: newACME builds it once both listeners are bound (it needs their ports to know that
// the challenges are answered there); start, from Serve, begins obtaining or loading the
// certificates in the background, since the HTTP-01 challenge needs the redirect listener
// already serving; stop, from Shutdown, ends the renewals.
type acmeManager struct {
	cfg     *certmagic.Config
	cache   *certmagic.Cache
	issuer  *certmagic.ACMEIssuer
	domains []string
	log     *slog.Logger

	ctx      context.Context // cancelled by stop
	cancel   context.CancelFunc
	stopOnce sync.Once
}

// newTLSConfig returns the TLS configuration of the HTTPS listener and, with ACME, its manager.
// httpsAddr is the bound address of the HTTPS listener; redirectAddr that of the redirect
// listener, or nil. Errors name the config key at fault.
func newTLSConfig(opts *TLSOptions, httpsAddr, redirectAddr net.Addr, log *slog.Logger) (*tls.Config, *acmeManager, error) {
	if len(opts.ACME.Domains) == 0 {
		if opts.CertFile == "" || opts.KeyFile == "" {
			return nil, nil, errors.New("http.tls: set cert and key, or acme.domains")
		}
		files := &certFiles{certFile: opts.CertFile, keyFile: opts.KeyFile, interval: certCheckInterval, log: log}
		if err := files.load(); err != nil {
			return nil, nil, fmt.Errorf("http.tls.cert and http.tls.key: %w", err)
		}
		return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: files.getCertificate}, nil, nil
	}
	m, err := newACME(&opts.ACME, httpsAddr, redirectAddr, log)
	if err != nil {
		return nil, nil, err
	}
	conf := m.cfg.TLSConfig() // GetCertificate, and acme-tls/1 for the TLS-ALPN-01 challenge
	conf.MinVersion = tls.VersionTLS12
	return conf, m, nil
}

func newACME(opts *ACMEOptions, httpsAddr, redirectAddr net.Addr, log *slog.Logger) (*acmeManager, error) {
	if opts.Storage == "" {
		return nil, errors.New("http.tls.acme.storage: no directory to keep certificates in")
	}
	var roots *x509.CertPool
	if opts.CARootFile != "" {
		pem, err := os.ReadFile(opts.CARootFile)
		if err != nil {
			return nil, fmt.Errorf("http.tls.acme.ca_root: %w", err)
		}
		if roots, err = x509.SystemCertPool(); err != nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("http.tls.acme.ca_root: no PEM certificate in %s", opts.CARootFile)
		}
	}
	zl := zap.New(slogCore{log: log})
	m := &acmeManager{domains: opts.Domains, log: log}
	m.ctx, m.cancel = context.WithCancel(context.Background()) // the server's life, not a request's
	m.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return m.cfg, nil },
		Logger:           zl,
	})
	m.cfg = certmagic.New(m.cache, certmagic.Config{
		Storage:           &certmagic.FileStorage{Path: opts.Storage},
		DefaultServerName: opts.Domains[0], // for clients that send no server name
		Logger:            zl,
		OnEvent:           m.event,
	})
	ca := opts.CA
	if ca == "" {
		ca = certmagic.LetsEncryptProductionCA
	}
	// The challenges are answered by the listeners Peregrine already has: certmagic, finding
	// the ports taken, does not start its own (it dials them to be sure).
	host, httpsPort := splitAddr(httpsAddr)
	template := certmagic.ACMEIssuer{
		CA:                      ca,
		Email:                   opts.Email,
		Agreed:                  true, // setting http.tls.acme accepts the CA's terms
		TrustedRoots:            roots,
		ListenHost:              host,
		AltTLSALPNPort:          httpsPort,
		DisableHTTPChallenge:    redirectAddr == nil,
		DisableTLSALPNChallenge: false,
		Logger:                  zl,
	}
	if redirectAddr != nil {
		_, template.AltHTTPPort = splitAddr(redirectAddr)
	}
	if httpsPort != certmagic.TLSALPNChallengePort && template.AltHTTPPort != certmagic.HTTPChallengePort {
		log.Warn("the ACME CA validates domains on port 443 (TLS-ALPN-01, http.address) or port 80 (HTTP-01, http.tls.redirect_address), and Peregrine listens on neither: forward one of them here",
			"component", "acme", "https_port", httpsPort, "redirect_port", template.AltHTTPPort)
	}
	m.issuer = certmagic.NewACMEIssuer(m.cfg, template)
	m.cfg.Issuers = []certmagic.Issuer{m.issuer}
	return m, nil
}

// start loads the certificates from storage, or obtains them, in the background; renewals
// follow until stop. An error means the domains could not even be taken in charge; after stop,
// start does nothing.
func (m *acmeManager) start() error {
	if m.ctx.Err() != nil {
		return nil
	}
	if err := m.cfg.ManageAsync(m.ctx, m.domains); err != nil && m.ctx.Err() == nil {
		return fmt.Errorf("http.tls.acme: %w", err)
	}
	return nil
}

// stop cancels what is in progress and ends the renewals. It may be called more than once.
func (m *acmeManager) stop() {
	m.stopOnce.Do(func() {
		m.cancel()
		m.cache.Stop()
	})
}

// event logs the certificate events an operator wants to see.
func (m *acmeManager) event(ctx context.Context, event string, data map[string]any) error {
	switch event {
	case "cert_obtained":
		m.log.Info("certificate obtained", "component", "acme", "identifier", data["identifier"], "renewal", data["renewal"], "issuer", data["issuer"])
	case "cert_failed":
		m.log.Error("certificate could not be obtained", "component", "acme", "identifier", data["identifier"], "renewal", data["renewal"], "err", data["error"])
	}
	return nil
}

// httpChallenges wraps h so that it answers the ACME HTTP-01 challenges of m.
func (m *acmeManager) httpChallenges(h http.Handler) http.Handler {
	return m.issuer.HTTPChallengeHandler(h)
}

func splitAddr(a net.Addr) (host string, port int) {
	h, p, err := net.SplitHostPort(a.String())
	if err != nil {
		return "", 0
	}
	n, _ := strconv.Atoi(p)
	if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
		h = ""
	}
	return h, n
}

// redirectHandler answers every request with 308 Permanent Redirect to the same URL over HTTPS
// on httpsPort (left out when it is 443). A request without a Host header gets 400, since there
// is nowhere to send it.
func redirectHandler(httpsPort string) http.Handler {
	suffix := ""
	if httpsPort != "443" {
		suffix = ":" + httpsPort
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if host == "" {
			httpError(w, http.StatusBadRequest, "no Host header: use https://")
			return
		}
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		target := "https://" + host + suffix + r.URL.RequestURI()
		w.Header().Set("Location", target)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusPermanentRedirect)
		if r.Method != http.MethodHead {
			_, _ = fmt.Fprintf(w, "308 Permanent Redirect: %s\n", target)
		}
	})
}

// slogCore sends certmagic's zap logs to the server's slog logger.
type slogCore struct {
	log   *slog.Logger
	attrs []slog.Attr
}

var _ zapcore.Core = slogCore{}

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	}
	return slog.LevelError
}

func (c slogCore) Enabled(l zapcore.Level) bool {
	return c.log.Enabled(context.Background(), slogLevel(l))
}

func (c slogCore) With(fields []zapcore.Field) zapcore.Core {
	return slogCore{log: c.log, attrs: append(c.attrs[:len(c.attrs):len(c.attrs)], fieldAttrs(fields)...)}
}

func (c slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	attrs := append([]slog.Attr{slog.String("component", "acme")}, c.attrs...)
	attrs = append(attrs, fieldAttrs(fields)...)
	c.log.LogAttrs(context.Background(), slogLevel(e.Level), e.Message, attrs...)
	return nil
}

func (slogCore) Sync() error { return nil }

func fieldAttrs(fields []zapcore.Field) []slog.Attr {
	if len(fields) == 0 {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields))
	for _, k := range slices.Sorted(maps.Keys(enc.Fields)) {
		attrs = append(attrs, slog.Any(k, enc.Fields[k]))
	}
	return attrs
}
