package protocol

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
)

// Field is one header name/value pair.
type Field struct {
	Name, Value string
}

// File is one uploaded file of a multipart/form-data request, already on disk.
type File struct {
	Field    string // form field name, e.g. "avatar" or "docs[]"
	Name     string // file name sent by the client
	Type     string // media type sent by the client
	Size     int64
	Error    int // PHP's UPLOAD_ERR_* code
	TempPath string
}

// Request is the content of a REQUEST frame.
type Request struct {
	Method, URI, Path, Query, Protocol string
	RemoteAddr, RemotePort             string
	ServerAddr, ServerPort             string
	Scheme                             string
	// Form holds multipart fields url-encoded; empty for other bodies.
	Form  string
	Files []File
	// Params are server parameters (CGI variables the server computed, e.g. SCRIPT_FILENAME),
	// written as they are.
	Params []Field
	// Headers are written with lower-cased names, in order.
	Headers []Field
	Body    []byte
}

// fixedFields is the number of head fields before the files: see docs/protocol.md.
const fixedFields = 12

// AppendRequest appends a REQUEST frame for r with the given id to dst. Header names are
// lower-cased as they are appended. It fails if a field contains a NUL byte, which the head's
// layout cannot carry, or if the frame would be longer than a frame can say (ErrTooLarge).
func AppendRequest(dst []byte, id uint32, r *Request) ([]byte, error) {
	dst, err := AppendRequestHead(dst, id, r, int64(len(r.Body)))
	if err != nil {
		return dst, err
	}
	return append(dst, r.Body...), nil
}

// AppendRequestHead appends a REQUEST frame for r whose body, bodyLen bytes, the caller writes
// after it; r.Body is ignored. The frame's length counts the body.
func AppendRequestHead(dst []byte, id uint32, r *Request, bodyLen int64) ([]byte, error) {
	start := len(dst)
	dst = AppendHeader(dst, Header{Type: TypeRequest, ID: id})
	dst = append(dst, 0, 0, 0, 0) // head_len, patched below
	headStart := len(dst)
	fields := [...]string{r.Method, r.URI, r.Path, r.Query, r.Protocol, r.RemoteAddr, r.RemotePort,
		r.ServerAddr, r.ServerPort, r.Scheme, r.Form}
	for i, f := range fields {
		if i > 0 {
			dst = append(dst, 0)
		}
		dst = append(dst, f...)
	}
	dst = append(dst, 0)
	dst = strconv.AppendInt(dst, int64(len(r.Files)), 10)
	for _, f := range r.Files {
		for _, s := range [...]string{f.Field, f.Name, f.Type} {
			dst = append(dst, 0)
			dst = append(dst, s...)
		}
		dst = append(dst, 0)
		dst = strconv.AppendInt(dst, f.Size, 10)
		dst = append(dst, 0)
		dst = strconv.AppendInt(dst, int64(f.Error), 10)
		dst = append(dst, 0)
		dst = append(dst, f.TempPath...)
	}
	dst = append(dst, 0)
	dst = strconv.AppendInt(dst, int64(len(r.Params)), 10)
	for _, p := range r.Params {
		dst = append(dst, 0)
		dst = append(dst, p.Name...)
		dst = append(dst, 0)
		dst = append(dst, p.Value...)
	}
	for _, h := range r.Headers {
		dst = append(dst, 0)
		dst = appendLower(dst, h.Name)
		dst = append(dst, 0)
		dst = append(dst, h.Value...)
	}
	head := dst[headStart:]
	// One field per NUL: fixed fields, files, params, header pairs. A NUL inside a value would
	// shift them.
	if want := fixedFields + 6*len(r.Files) + 2*len(r.Params) + 2*len(r.Headers); bytes.Count(head, []byte{0}) != want {
		return dst[:start], fmt.Errorf("%w: a request field contains a NUL byte", ErrMalformed)
	}
	total := int64(len(dst)-start-HeaderSize) + bodyLen
	if bodyLen < 0 || total > MaxPayload {
		return dst[:start], fmt.Errorf("%w: a request of %d bytes", ErrTooLarge, total)
	}
	binary.LittleEndian.PutUint32(dst[headStart-4:], uint32(len(head)))
	binary.LittleEndian.PutUint32(dst[start+8:], uint32(total))
	return dst, nil
}

func appendLower(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// DecodeRequest parses a REQUEST payload. Strings and Body alias nothing: they are copies.
// The server never decodes requests; this exists for tests, fuzzing and tools.
func DecodeRequest(payload []byte) (*Request, error) {
	if len(payload) < 4 {
		return nil, fmt.Errorf("%w: request payload of %d bytes", ErrMalformed, len(payload))
	}
	headLen := binary.LittleEndian.Uint32(payload)
	if uint64(headLen) > uint64(len(payload)-4) {
		return nil, fmt.Errorf("%w: head length %d exceeds payload", ErrMalformed, headLen)
	}
	parts := bytes.Split(payload[4:4+headLen], []byte{0})
	if len(parts) < fixedFields {
		return nil, fmt.Errorf("%w: %d head fields, want at least %d", ErrMalformed, len(parts), fixedFields)
	}
	s := func(i int) string { return string(parts[i]) }
	r := &Request{
		Method: s(0), URI: s(1), Path: s(2), Query: s(3), Protocol: s(4),
		RemoteAddr: s(5), RemotePort: s(6), ServerAddr: s(7), ServerPort: s(8), Scheme: s(9), Form: s(10),
		Body: bytes.Clone(payload[4+headLen:]),
	}
	if r.Body == nil {
		r.Body = []byte{}
	}
	n, err := strconv.Atoi(s(11))
	if err != nil || n < 0 || n > (len(parts)-fixedFields)/6 {
		return nil, fmt.Errorf("%w: file count %q", ErrMalformed, parts[11])
	}
	i := fixedFields
	for ; n > 0; n-- {
		size, err1 := strconv.ParseInt(s(i+3), 10, 64)
		code, err2 := strconv.Atoi(s(i + 4))
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%w: file %q size %q error %q", ErrMalformed, parts[i], parts[i+3], parts[i+4])
		}
		r.Files = append(r.Files, File{Field: s(i), Name: s(i + 1), Type: s(i + 2), Size: size, Error: code, TempPath: s(i + 5)})
		i += 6
	}
	if i >= len(parts) {
		return nil, fmt.Errorf("%w: no parameter count", ErrMalformed)
	}
	np, err := strconv.Atoi(s(i))
	if err != nil || np < 0 || np > (len(parts)-i-1)/2 {
		return nil, fmt.Errorf("%w: parameter count %q", ErrMalformed, parts[i])
	}
	i++
	for ; np > 0; np-- {
		r.Params = append(r.Params, Field{Name: s(i), Value: s(i + 1)})
		i += 2
	}
	if (len(parts)-i)%2 != 0 {
		return nil, fmt.Errorf("%w: odd number of header fields", ErrMalformed)
	}
	for ; i < len(parts); i += 2 {
		r.Headers = append(r.Headers, Field{Name: s(i), Value: s(i + 1)})
	}
	return r, nil
}
