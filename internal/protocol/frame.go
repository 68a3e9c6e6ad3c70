// Package protocol owns the binary frames exchanged between the server and its PHP workers:
// the 12-byte frame header, the REQUEST and RESPONSE payloads, and reading frames from a stream.
// docs/protocol.md is the specification; testdata/protocol holds vectors that the PHP library
// decodes byte for byte too.
//
// The package knows nothing about HTTP, processes or pools, and imports nothing of this module.
package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Version is the protocol version carried in every frame header.
const Version = 3

// HeaderSize is the size of a frame header in bytes.
const HeaderSize = 12

// Type is a frame's kind.
type Type uint8

// Frame types; docs/protocol.md says who sends which.
const (
	TypeReady    Type = 1
	TypeRequest  Type = 2
	TypeResponse Type = 3
	TypeStop     Type = 4
	TypeError    Type = 5
	TypeBody     Type = 6
	TypeHints    Type = 7
	TypeDone     Type = 8
	TypeCancel   Type = 9
)

// Flags of RESPONSE, BODY and DONE frames.
const (
	// FlagMore says more of the body follows in BODY frames.
	FlagMore uint16 = 1 << 0
	// FlagFlush asks the server to send the body so far to the client now.
	FlagFlush uint16 = 1 << 1
	// FlagLast, on a DONE frame, says the worker exits: it read no request after this one.
	FlagLast uint16 = 1 << 2
)

// Limits on what a worker may send; docs/protocol.md states them.
const (
	// MaxWorkerFrame is the largest payload of a frame from a worker.
	MaxWorkerFrame = 2 << 20
	// MaxHead is the largest head of a RESPONSE or HINTS frame.
	MaxHead = 256 << 10
	// MaxHeaderFields is the most header fields a RESPONSE or HINTS frame may carry.
	MaxHeaderFields = 1000
	// MaxPayload is the largest payload any frame can describe: its length is a u32.
	MaxPayload = 1<<32 - 1
)

func (t Type) String() string {
	switch t {
	case TypeReady:
		return "READY"
	case TypeRequest:
		return "REQUEST"
	case TypeResponse:
		return "RESPONSE"
	case TypeStop:
		return "STOP"
	case TypeError:
		return "ERROR"
	case TypeBody:
		return "BODY"
	case TypeHints:
		return "HINTS"
	case TypeDone:
		return "DONE"
	case TypeCancel:
		return "CANCEL"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Errors returned when a peer breaks the protocol.
var (
	ErrVersion   = errors.New("protocol: unsupported version")
	ErrType      = errors.New("protocol: unknown frame type")
	ErrTooLarge  = errors.New("protocol: frame larger than allowed")
	ErrMalformed = errors.New("protocol: malformed payload")
)

// Header is a decoded frame header.
type Header struct {
	Type   Type
	Flags  uint16
	ID     uint32
	Length uint32
}

// AppendHeader appends the encoding of h to dst.
func AppendHeader(dst []byte, h Header) []byte {
	dst = append(dst, Version, byte(h.Type))
	dst = binary.LittleEndian.AppendUint16(dst, h.Flags)
	dst = binary.LittleEndian.AppendUint32(dst, h.ID)
	return binary.LittleEndian.AppendUint32(dst, h.Length)
}

// ParseHeader decodes a frame header from the first HeaderSize bytes of b.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: header of %d bytes", ErrMalformed, len(b))
	}
	if b[0] != Version {
		return Header{}, fmt.Errorf("%w: %d (first bytes %q)", ErrVersion, b[0], b[:HeaderSize])
	}
	h := Header{
		Type:   Type(b[1]),
		Flags:  binary.LittleEndian.Uint16(b[2:]),
		ID:     binary.LittleEndian.Uint32(b[4:]),
		Length: binary.LittleEndian.Uint32(b[8:]),
	}
	if h.Type < TypeReady || h.Type > TypeCancel {
		return Header{}, fmt.Errorf("%w: %d (first bytes %q)", ErrType, b[1], b[:HeaderSize])
	}
	return h, nil
}

// AppendFrame appends a whole frame with the given payload to dst. The payload must be shorter
// than MaxPayload; the frames built with it (STOP, tests) are small.
func AppendFrame(dst []byte, t Type, id uint32, payload []byte) []byte {
	return AppendFlagged(dst, t, 0, id, payload)
}

// AppendFlagged is AppendFrame with flags.
func AppendFlagged(dst []byte, t Type, flags uint16, id uint32, payload []byte) []byte {
	dst = AppendHeader(dst, Header{Type: t, Flags: flags, ID: id, Length: uint32(len(payload))})
	return append(dst, payload...)
}

// ReadFrame reads one frame from r. A payload longer than maxLen is refused with ErrTooLarge
// before anything is allocated for it. The returned payload is freshly allocated and owned by
// the caller.
func ReadFrame(r io.Reader, maxLen uint32) (Header, []byte, error) {
	var hb [HeaderSize]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return Header{}, nil, err
	}
	h, err := ParseHeader(hb[:])
	if err != nil {
		return Header{}, nil, err
	}
	if h.Length > maxLen {
		return h, nil, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, h.Length, maxLen)
	}
	payload := make([]byte, h.Length)
	if _, err := io.ReadFull(r, payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return h, nil, fmt.Errorf("read %s payload: %w", h.Type, err)
	}
	return h, payload, nil
}
