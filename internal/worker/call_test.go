package worker

import (
	"bytes"
	"encoding/binary"
	"io"
	"sync/atomic"
	"testing"

	"github.com/peregrinephp/peregrine/internal/protocol"
)

// TestCallReleasesAtItsLastDrop: Release runs once, at the Drop that leaves no holder, whatever
// the order in which the holders (the pool, an exchange's writer and request) let go.
func TestCallReleasesAtItsLastDrop(t *testing.T) {
	for _, holds := range []int{1, 2, 3} {
		var released countReleases
		c := &Call{Owner: &released}
		for range holds {
			c.Hold()
		}
		for i := range holds {
			if released.n.Load() != 0 {
				t.Fatalf("%d holds: released after %d drops", holds, i)
			}
			c.Drop()
		}
		if n := released.n.Load(); n != 1 {
			t.Fatalf("%d holds: released %d times, want 1", holds, n)
		}
	}
}

// countReleases is an Owner that counts its releases.
type countReleases struct{ n atomic.Int32 }

func (c *countReleases) Release() { c.n.Add(1) }

// TestCallBodyIsWholeEveryTime: a call that was not read goes to another worker whole, however
// much of its body the first write took.
func TestCallBodyIsWholeEveryTime(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789"), 10000)
	frame, err := protocol.AppendRequestHead(nil, 0, &protocol.Request{Method: "PUT", URI: "/"}, int64(len(body)))
	if err != nil {
		t.Fatal(err)
	}
	// More bytes than the frame says are never written.
	c := &Call{Frame: frame, Body: bytes.NewReader(append(bytes.Clone(body), "junk"...))}
	for _, first := range []int{0, 1, PipeBuffer, len(body)} {
		r, _ := c.body()
		if _, err := io.CopyN(io.Discard, r, int64(first)); err != nil {
			t.Fatal(err)
		}
		r, _ = c.body()
		got, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("after a first write of %d bytes: %d bytes, err %v; want the whole %d", first, len(got), err, len(body))
		}
	}
	if int(binary.LittleEndian.Uint32(frame[8:])) != len(frame)-protocol.HeaderSize+len(body) {
		t.Fatal("the frame's length does not count its body")
	}
}
