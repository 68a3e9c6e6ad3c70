// Package tables owns the shared-memory segment of Peregrine's shared tables (docs/tables.md):
// its layout, which native/table.h reads, creating it before any worker starts, removing it when
// the server stops, sweeping the segments of dead servers, and reading each table's figures for
// peregrine tables and the metrics. It must not read or write rows: that is the native runtime's
// (native/table.c), under the table's lock and undo journal.
//
// The segment, all integers little-endian:
//
//	header      magic "PGTABLES", version, table count, size, daemon pid      64 bytes
//	descriptors one per table: name, key, capacity, buckets, row stride,      2048 bytes each
//	            offsets in the row and in the segment, columns
//	per table   state block (lock, sequence, rows used, high-water mark,      64 + journal, 64-aligned
//	            free list head, journal counts, read retries, undo journal)
//	            rows                                                          capacity x stride
//	            hash buckets, then one bucket array per index                 4 bytes x capacity each
package tables

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// Layout constants, mirrored in native/table.h.
const (
	Magic            = "PGTABLES"
	Version          = 1
	headerSize       = 64
	descSize         = 2048
	descColumns      = 192 // offset of the first column in a descriptor
	columnSize       = 48
	maxColumns       = 32
	maxIndexes       = 8
	stateHeader      = 64
	stateCount       = 8  // the state block's rows used (u32)
	stateReadRetries = 32 // the state block's read_retries (u64)
	journalEntries   = 64 // besides the row image: enough for every word one write changes
	journalEntry     = 16 // u64 offset, u32 length, u32 pad; the old bytes follow, padded to 8
)

// Type is a column's type.
type Type uint32

// The column types; the values are the segment's.
const (
	Int8 Type = iota + 1
	Int16
	Int32
	Int64
	Float
	String
)

var typeNames = map[string]Type{"int8": Int8, "int16": Int16, "int32": Int32, "int64": Int64, "float": Float, "string": String}

// ParseType returns the Type of a name as config.ParseColumnType returns it (int32, string).
func ParseType(kind string) (Type, error) {
	if t, ok := typeNames[kind]; ok {
		return t, nil
	}
	return 0, fmt.Errorf("unknown column type %q", kind)
}

// Column is one column of a Spec.
type Column struct {
	Name string
	Type Type
	// Size is the value's size in bytes: 1, 2, 4 or 8, or N for a String.
	Size int
}

// Spec describes one table as the config defines it.
type Spec struct {
	Name     string
	Capacity int
	// KeySize is 0 for an int key, N for a string(N) key.
	KeySize int
	Columns []Column
	// Indexes names the indexed columns, each an int column.
	Indexes []string
}

// placed is a column with its offset in the row and its index number (-1 for none).
type placed struct {
	Column
	offset int
	index  int
}

// tableLayout is one table's place in the segment.
type tableLayout struct {
	spec                       Spec
	stride                     int
	hnext, inext, used         int
	columns                    []placed
	journalCap                 int
	state, rows, buckets, ibkt int64
	end                        int64
}

// Bytes is the table's share of the segment: state block, rows and buckets.
func (t *tableLayout) Bytes() int64 { return t.end - t.state }

func align(n, a int64) int64 { return (n + a - 1) / a * a }

// rowLayout places the key, the columns, the chain links and the used flag in a row, largest
// alignment first so that padding is least: a HighLoad Cup visit (int key, int64 and two int32
// and an int8 column, two indexes) takes 40 bytes.
func rowLayout(s Spec) (cols []placed, hnext, inext, used, stride int) {
	off := 8
	if s.KeySize > 0 {
		off = int(align(int64(2+s.KeySize), 8))
	}
	cols = make([]placed, len(s.Columns))
	for i, c := range s.Columns {
		cols[i] = placed{Column: c, index: slices.Index(s.Indexes, c.Name)}
	}
	place := func(match func(Column) bool, alignment int) {
		for i := range cols {
			if match(cols[i].Column) {
				off = int(align(int64(off), int64(alignment)))
				cols[i].offset = off
				if cols[i].Type == String {
					off += 2 + cols[i].Size
				} else {
					off += cols[i].Size
				}
			}
		}
	}
	place(func(c Column) bool { return c.Type == Int64 || c.Type == Float }, 8)
	hnext = off
	inext = hnext + 4
	off = inext + 4*len(s.Indexes)
	place(func(c Column) bool { return c.Type == Int32 }, 4)
	place(func(c Column) bool { return c.Type == Int16 || c.Type == String }, 2)
	place(func(c Column) bool { return c.Type == Int8 }, 1)
	used = off
	stride = int(align(int64(used+1), 8))
	return cols, hnext, inext, used, stride
}

// plan lays out the tables and returns their places and the segment's size.
func plan(specs []Spec) ([]tableLayout, int64, error) {
	tls := make([]tableLayout, len(specs))
	off := align(int64(headerSize+descSize*len(specs)), 64)
	for i, s := range specs {
		if len(s.Name) == 0 || len(s.Name) > 63 || len(s.Columns) == 0 || len(s.Columns) > maxColumns ||
			len(s.Indexes) > maxIndexes || s.Capacity <= 0 || s.Capacity > 1<<31-1 {
			return nil, 0, fmt.Errorf("table %q: out of the layout's limits", s.Name)
		}
		t := &tls[i]
		t.spec = s
		t.columns, t.hnext, t.inext, t.used, t.stride = rowLayout(s)
		t.journalCap = t.stride + journalEntry + journalEntries*(journalEntry+8)
		t.state = off
		t.rows = align(t.state+int64(stateHeader+t.journalCap), 64)
		t.buckets = t.rows + int64(s.Capacity)*int64(t.stride)
		t.ibkt = t.buckets + 4*int64(s.Capacity)
		t.end = t.ibkt + 4*int64(s.Capacity)*int64(len(s.Indexes))
		off = align(t.end, 64)
	}
	return tls, align(off, 4096), nil
}

// header returns the segment's header and descriptors, the part of it Create writes.
func header(tls []tableLayout, size int64, pid int) []byte {
	b := make([]byte, headerSize+descSize*len(tls))
	le := binary.LittleEndian
	copy(b, Magic)
	le.PutUint32(b[8:], Version)
	le.PutUint32(b[12:], uint32(len(tls)))
	le.PutUint64(b[16:], uint64(size))
	le.PutUint32(b[24:], uint32(pid))
	for i, t := range tls {
		d := b[headerSize+i*descSize:][:descSize]
		copy(d[:64], t.spec.Name)
		keyKind, keySize := uint32(1), uint32(8)
		if t.spec.KeySize > 0 {
			keyKind, keySize = 2, uint32(t.spec.KeySize)
		}
		for j, v := range []uint32{keyKind, keySize, uint32(t.spec.Capacity), uint32(t.spec.Capacity), uint32(t.stride),
			uint32(len(t.columns)), uint32(len(t.spec.Indexes)), 0, uint32(t.hnext), uint32(t.inext), uint32(t.used),
			uint32(t.journalCap)} {
			le.PutUint32(d[64+4*j:], v)
		}
		for j, v := range []int64{t.state, t.rows, t.buckets, t.ibkt, t.Bytes()} {
			le.PutUint64(d[112+8*j:], uint64(v))
		}
		for j, c := range t.columns {
			cd := d[descColumns+j*columnSize:][:columnSize]
			copy(cd[:32], c.Name)
			le.PutUint32(cd[32:], uint32(c.Type))
			le.PutUint32(cd[36:], uint32(c.Size))
			le.PutUint32(cd[40:], uint32(c.offset))
			le.PutUint32(cd[44:], uint32(int32(c.index)))
		}
	}
	return b
}
