package protocol

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Response is the content of a RESPONSE frame.
type Response struct {
	Status  int
	Headers []Field
	Body    []byte
}

// DecodeResponse parses a RESPONSE payload. Body is taken from payload (it aliases it), so
// payload must not be reused while Body is in use; header strings are copies. A head longer than
// MaxHead or with more than MaxHeaderFields fields is refused with ErrTooLarge.
func DecodeResponse(payload []byte) (Response, error) {
	if len(payload) < 6 {
		return Response{}, fmt.Errorf("%w: response payload of %d bytes", ErrMalformed, len(payload))
	}
	status := int(binary.LittleEndian.Uint16(payload))
	if status < 100 || status > 999 {
		return Response{}, fmt.Errorf("%w: status %d", ErrMalformed, status)
	}
	headLen := binary.LittleEndian.Uint32(payload[2:])
	if uint64(headLen) > uint64(len(payload)-6) {
		return Response{}, fmt.Errorf("%w: head length %d exceeds payload of %d bytes", ErrMalformed, headLen, len(payload))
	}
	headers, err := DecodeFields(payload[6 : 6+headLen])
	if err != nil {
		return Response{}, err
	}
	return Response{Status: status, Headers: headers, Body: payload[6+headLen:]}, nil
}

// DecodeFields parses header name/value pairs joined by NUL bytes: the head of a RESPONSE, or
// a HINTS payload. A head longer than MaxHead or with more than MaxHeaderFields fields is refused
// with ErrTooLarge before anything is allocated for it.
func DecodeFields(head []byte) ([]Field, error) {
	if len(head) == 0 {
		return nil, nil
	}
	if len(head) > MaxHead {
		return nil, fmt.Errorf("%w: response head of %d bytes, at most %d", ErrTooLarge, len(head), MaxHead)
	}
	n := bytes.Count(head, []byte{0}) + 1
	if n%2 != 0 {
		return nil, fmt.Errorf("%w: odd number of response header fields", ErrMalformed)
	}
	if n/2 > MaxHeaderFields {
		return nil, fmt.Errorf("%w: %d response header fields, at most %d", ErrTooLarge, n/2, MaxHeaderFields)
	}
	fields := make([]Field, 0, n/2)
	for len(head) > 0 {
		i := bytes.IndexByte(head, 0)
		name := head[:i]
		head = head[i+1:]
		j := bytes.IndexByte(head, 0)
		var value []byte
		if j < 0 {
			value, head = head, nil
		} else {
			value, head = head[:j], head[j+1:]
		}
		if len(name) == 0 {
			return nil, fmt.Errorf("%w: empty response header name", ErrMalformed)
		}
		fields = append(fields, Field{Name: string(name), Value: string(value)})
	}
	return fields, nil
}

// AppendResponse appends a RESPONSE frame to dst. The PHP library does this in production; the
// Go side uses it in tests and to produce the shared vectors.
func AppendResponse(dst []byte, id uint32, r *Response) ([]byte, error) {
	start := len(dst)
	dst = AppendHeader(dst, Header{Type: TypeResponse, ID: id})
	dst = binary.LittleEndian.AppendUint16(dst, uint16(r.Status))
	dst = append(dst, 0, 0, 0, 0)
	headStart := len(dst)
	for i, h := range r.Headers {
		if i > 0 {
			dst = append(dst, 0)
		}
		if h.Name == "" || bytes.IndexByte([]byte(h.Name), 0) >= 0 || bytes.IndexByte([]byte(h.Value), 0) >= 0 {
			return dst[:start], fmt.Errorf("%w: response header %q", ErrMalformed, h.Name)
		}
		dst = append(dst, h.Name...)
		dst = append(dst, 0)
		dst = append(dst, h.Value...)
	}
	binary.LittleEndian.PutUint32(dst[headStart-4:], uint32(len(dst)-headStart))
	dst = append(dst, r.Body...)
	binary.LittleEndian.PutUint32(dst[start+8:], uint32(len(dst)-start-HeaderSize))
	return dst, nil
}
