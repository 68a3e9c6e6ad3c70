package nativetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peregrinephp/peregrine/internal/tables"
)

// tableSegment creates table.php's tables in a fresh segment and returns its path.
func tableSegment(t *testing.T) string {
	t.Helper()
	specs := []tables.Spec{
		{Name: "visits", Capacity: 200, Columns: []tables.Column{{Name: "user", Type: tables.Int32, Size: 4},
			{Name: "location", Type: tables.Int32, Size: 4}, {Name: "visited_at", Type: tables.Int64, Size: 8},
			{Name: "mark", Type: tables.Int8, Size: 1}}, Indexes: []string{"user", "location"}},
		{Name: "sessions", Capacity: 6, KeySize: 8, Columns: []tables.Column{{Name: "name", Type: tables.String, Size: 5},
			{Name: "score", Type: tables.Float, Size: 8}, {Name: "n", Type: tables.Int64, Size: 8}}},
	}
	seg, err := tables.Create(t.TempDir(), specs, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = seg.Remove() })
	return seg.Path()
}

// runTableScript runs testdata/table.php to its end under argv's runtime and returns its output.
func runTableScript(t *testing.T, env []string, argv ...string) (string, int) {
	t.Helper()
	p := startEnv(t, append(env, tables.EnvVar+"="+tableSegment(t)), append(argv, filepath.Join(root, "native", "test", "testdata", "table.php"))...)
	code := p.waitExit(t)
	return p.log.String(), code
}

const tableWant = `empty: [0,200,null,false,false,"visits"]
get: {"user":7,"location":9,"visited_at":1500000000,"mark":5}
column: [-1,-128,0,null]
count: [3,3,true,false]
where user 7: {"1":{"user":7,"location":9,"visited_at":1500000000,"mark":5},"2":{"user":7,"location":10,"visited_at":-1,"mark":-128}}
where location 10: [2,3]
moved: [[3],[2],7]
incr: [5,4,-6,9223372036854775807]
incr indexed: [8,[3,1],[2]]
incr creates: [1,{"user":0,"location":1,"visited_at":0,"mark":0}]
del: [true,false,3,[],[]]
foreach: {"1":8,"2":1,"3":8,"50":0}
nested foreach: 16
iterator: 4
churn: [54,52]
incr columns: [{"visited_at":5,"mark":2},{"mark":-1,"visited_at":6},{"mark":-2},{"user":0,"location":0,"visited_at":6,"mark":-2}]
incr columns indexed: [{"user":40,"location":41},[500],[500],true]
incr columns wrap: [{"mark":125},{"mark":-126}]
cas: [false,true,7,false,false,true,{"user":0,"location":0,"visited_at":0,"mark":3}]
cas indexed: [true,[501],false,[501],true,true,54]
string key: [{"name":"hello","score":1.5,"n":0},{"name":"","score":0,"n":0},1.75,-3,false]
binary: [null,true,false]
too long: table sessions, column name: a string of 7 bytes is longer than the column's 5
unknown column: table sessions has no column nope
list: table sessions: a row is an array of column names to values, got an integer key
wrong type: table sessions, column n: want an int, got string
float for int: table sessions, column n: want an int, got float
int key for string: table sessions: the key is a string, got int
key too long: table sessions: a key of 9 bytes is longer than the table's string(8)
string key for int: table visits: the key is an int, got string
unknown table: unknown table nope: the server's tables.define does not name it
no index: table visits, column mark has no index: list it under tables.define.visits.indexes
where unknown: table visits has no column nope
get unknown: table visits has no column nope
incr string: table sessions, column name: incr and decr need an int or float column, not string(5)
incr by float: table visits, column mark: an int column is incremented by an int, got float
int8 range: table visits, column mark: 128 does not fit an int8
int32 range: table visits, column user: 2147483648 does not fit an int32
full: table sessions is full: all its 6 rows are used (raise tables.define.sessions.rows)
full incr: table sessions is full: all its 6 rows are used (raise tables.define.sessions.rows)
after errors: [6,"hello",5]
cas types: [true,"bye",false,true,2,true,true,-9223372036854775808]
incr columns float: {"score":2.5,"n":-9223372036854775806}
cas full: table sessions is full: all its 6 rows are used (raise tables.define.sessions.rows)
cas full, no match: false
cas wrong type: table sessions, column n: want an int, got string
cas too long: table sessions, column name: a string of 7 bytes is longer than the column's 5
cas int8 range: table visits, column mark: 128 does not fit an int8
cas unknown: table visits has no column nope
incr columns unknown: table visits has no column nope
incr columns string: table sessions, column name: incr and decr need an int or float column, not string(5)
incr columns float for int: table visits, column mark: an int column is incremented by an int, got float
incr columns not a number: table visits, column mark: incr and decr add an int or a float, got string
incr columns list: table visits: incr and decr take an array of column names to amounts, got an integer key
incr columns empty: table visits: incr and decr need at least one column
incr columns and by: table visits: incr and decr with an array of columns take no third argument: the array says what to add
after incr errors: [5,-9223372036854775806,6,54]
new: "Call to private Peregrine\\Table::__construct() from global scope"
clone: "Trying to clone an uncloneable object of class Peregrine\\Table"
serialize: "Serialization of 'Peregrine\\Table' is not allowed"
final: [true,true,true]
`

// TestTable checks Peregrine\Table's operations and errors in one process.
func TestTable(t *testing.T) {
	out, code := runTableScript(t, nil, runtime)
	if code != 0 || out != tableWant {
		t.Errorf("exit %d; output:\n%s\ndiff from want:\n%s", code, out, lineDiff(out, tableWant))
	}
}

// TestTableValgrind runs the same under memcheck with PHP's allocator off: no invalid access,
// no leak of the table's arrays, iterators or exceptions.
func TestTableValgrind(t *testing.T) {
	memoryTests(t)
	valgrind, err := exec.LookPath("valgrind")
	if err != nil {
		t.Fatal("valgrind is not installed (apt-get install valgrind)")
	}
	out, code := runTableScript(t, []string{"USE_ZEND_ALLOC=0"}, valgrind, "-q", "--error-exitcode=99", "--leak-check=full",
		"--errors-for-leak-kinds=definite", "--suppressions="+filepath.Join(root, "native", "valgrind.supp"), runtime)
	if code != 0 || out != tableWant {
		t.Errorf("under valgrind: exit %d (99: memcheck found errors); output:\n%s", code, out)
	}
}

func lineDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	var b strings.Builder
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			b.WriteString("- " + wl + "\n+ " + gl + "\n")
		}
	}
	return b.String()
}
