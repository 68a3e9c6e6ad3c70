package http1

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// wireConn is a connection whose client sent in and then closed; what the server writes is kept.
type wireConn struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (c *wireConn) Read(p []byte) (int, error)         { return c.in.Read(p) }
func (c *wireConn) Write(p []byte) (int, error)        { return c.out.Write(p) }
func (c *wireConn) Close() error                       { return nil }
func (c *wireConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (c *wireConn) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (c *wireConn) SetDeadline(time.Time) error        { return nil }
func (c *wireConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *wireConn) SetWriteDeadline(t time.Time) error { return nil }

// FuzzConnection: whatever a client sends, a connection ends (its client closed), every answer
// starts with a status line, and nothing panics.
func FuzzConnection(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b\r\nhello\r\n0\r\nT: 1\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx",
		"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"\r\n\r\nGET http://h/x?y HTTP/1.1\nHost: x\n\n",
	} {
		f.Add([]byte(seed))
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if len(b) > 0 && b[0]&1 == 1 {
			w.(http.Flusher).Flush()
		}
		_, _ = w.Write(b)
	})
	f.Fuzz(func(t *testing.T, in []byte) {
		s := &Server{Handler: h, MaxHeaderBytes: 4096}
		wc := &wireConn{in: bytes.NewReader(in)}
		c := s.newConn(wc)
		c.serve()
		out := wc.out.Bytes()
		if len(out) > 0 && !bytes.HasPrefix(out, []byte("HTTP/1.")) {
			t.Fatalf("answer does not start with a status line: %q", out)
		}
	})
}
