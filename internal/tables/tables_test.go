package tables

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/peregrinephp/peregrine/internal/config"
)

func visits() Spec {
	return Spec{Name: "visits", Capacity: 11_000_000, Columns: []Column{
		{"user", Int32, 4}, {"location", Int32, 4}, {"visited_at", Int64, 8}, {"mark", Int8, 1},
	}, Indexes: []string{"user", "location"}}
}

// TestVisitsFit: the HighLoad Cup's 11M visits fit in the 704 MB of the seed's best.
func TestVisitsFit(t *testing.T) {
	tls, size, err := plan([]Spec{visits()})
	if err != nil {
		t.Fatal(err)
	}
	v := tls[0]
	if v.stride != 40 {
		t.Errorf("stride %d, want 40", v.stride)
	}
	if perRow := float64(v.Bytes()) / 11e6; perRow > 52.01 {
		t.Errorf("%.2f bytes a row, want 52", perRow)
	}
	if size > 704_000_000 {
		t.Errorf("segment of %d bytes, over the seed's 704 MB", size)
	}
	want := map[string]int{"visited_at": 8, "user": 28, "location": 32, "mark": 36}
	for _, c := range v.columns {
		if c.offset != want[c.Name] {
			t.Errorf("%s at %d, want %d", c.Name, c.offset, want[c.Name])
		}
	}
	if v.hnext != 16 || v.inext != 20 || v.used != 37 {
		t.Errorf("hnext %d inext %d used %d", v.hnext, v.inext, v.used)
	}
}

// TestRowsDoNotOverlap: every field of a row lies inside the stride and apart from the others,
// whatever the mix of types.
func TestRowsDoNotOverlap(t *testing.T) {
	s := Spec{Name: "t", Capacity: 3, KeySize: 13, Columns: []Column{
		{"a", Int8, 1}, {"b", String, 5}, {"c", Float, 8}, {"d", Int16, 2}, {"e", Int32, 4}, {"f", Int64, 8}, {"g", String, 1},
	}, Indexes: []string{"a", "f"}}
	cols, hnext, inext, used, stride := rowLayout(s)
	taken := make([]bool, stride)
	mark := func(name string, off, n int) {
		for i := off; i < off+n; i++ {
			if i >= stride || taken[i] {
				t.Fatalf("%s at %d+%d overlaps or leaves the %d-byte row", name, off, n, stride)
			}
			taken[i] = true
		}
	}
	mark("key", 0, 2+13)
	mark("hnext", hnext, 4)
	mark("inext", inext, 8)
	mark("used", used, 1)
	for _, c := range cols {
		n := c.Size
		if c.Type == String {
			n += 2
		}
		mark(c.Name, c.offset, n)
		if (c.Type == Int64 || c.Type == Float) && c.offset%8 != 0 || c.Type == Int32 && c.offset%4 != 0 {
			t.Errorf("%s misaligned at %d", c.Name, c.offset)
		}
	}
}

func TestCreateStatsRemove(t *testing.T) {
	dir := t.TempDir()
	specs, err := Specs([]config.TableDef{{Name: "hits", Rows: 1000, Key: "string(20)",
		Columns: []config.TableColumn{{Name: "n", Type: "int64"}}}})
	if err != nil {
		t.Fatal(err)
	}
	seg, err := Create(dir, specs, 4242)
	if err != nil {
		t.Fatal(err)
	}
	if seg.Path() != filepath.Join(dir, "peregrine-tables-4242") {
		t.Errorf("path %s", seg.Path())
	}
	data, err := os.ReadFile(seg.Path())
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) != seg.Size() || string(data[:8]) != Magic || binary.LittleEndian.Uint32(data[12:]) != 1 {
		t.Errorf("size %d of %d, header % x", len(data), seg.Size(), data[:16])
	}
	// A worker's write of the rows-used count and of the read retries (native/table.h's
	// struct pgt_state) shows in Stats.
	state := int64(binary.LittleEndian.Uint64(data[headerSize+112:]))
	f, _ := os.OpenFile(seg.Path(), os.O_RDWR, 0)
	binary.LittleEndian.PutUint32(data[:4], 17)
	if _, err := f.WriteAt(data[:4], state+8); err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint64(data[:8], 1<<40+3)
	if _, err := f.WriteAt(data[:8], state+32); err != nil {
		t.Fatal(err)
	}
	f.Close()
	st, err := seg.Stats()
	if err != nil || len(st) != 1 || st[0].Rows != 17 || st[0].Capacity != 1000 || st[0].Name != "hits" || st[0].RowBytes != 40 ||
		st[0].ReadRetries != 1<<40+3 {
		t.Errorf("stats %+v, %v", st, err)
	}
	if err := seg.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(seg.Path()); !os.IsNotExist(err) {
		t.Errorf("segment left behind: %v", err)
	}
}

// TestSweep removes the segment of a dead daemon and keeps a live one's.
func TestSweep(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(dir, "peregrine-tables-"+itoa(cmd.Process.Pid))
	live := filepath.Join(dir, "peregrine-tables-1") // init never dies
	for _, p := range []string{dead, live} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n, err := Sweep(dir)
	if err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v", n, err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Error("the dead daemon's segment is still there")
	}
	if _, err := os.Stat(live); err != nil {
		t.Error("the live daemon's segment was removed")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestCreateFull: a tmpfs without room for the tables fails Create with a hint, and leaves no
// file behind.
func TestCreateFull(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	_, err := Create(dir, []Spec{visits()}, 4243)
	if err == nil || !strings.Contains(err.Error(), "no space left") || !strings.Contains(err.Error(), "--shm-size") {
		t.Fatalf("Create on a full tmpfs: %v", err)
	}
	if names, _ := filepath.Glob(filepath.Join(dir, "*")); len(names) != 0 {
		t.Errorf("left behind: %v", names)
	}
}
