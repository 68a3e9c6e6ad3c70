package config

import (
	"strings"
	"testing"
)

func TestTablesParse(t *testing.T) {
	src := `tables:
  init: php load.php
  define:
    visits:
      rows: 11000000
      key: int
      columns: { user: int32, location: int32, visited_at: int64, mark: int8 }
      indexes: [user, location]
    sessions:
      rows: 100
      key: string(32)
      columns: { data: string(200), hits: int64, score: float }
`
	c, err := Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Tables.Init, " "); got != "php load.php" {
		t.Errorf("init = %q", got)
	}
	if len(c.Tables.Define) != 2 || c.Tables.Define[0].Name != "visits" || c.Tables.Define[1].Name != "sessions" {
		t.Fatalf("define = %+v", c.Tables.Define)
	}
	v := c.Tables.Define[0]
	if v.Rows != 11000000 || v.Key != "int" || len(v.Columns) != 4 || v.Columns[2] != (TableColumn{"visited_at", "int64"}) ||
		strings.Join(v.Indexes, ",") != "user,location" {
		t.Errorf("visits = %+v", v)
	}
	// The effective configuration reads back the same.
	out := c.EffectiveYAML()
	c2, err := Parse("effective", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(c2.Tables.Define) != 2 || c2.Tables.Define[1].Columns[0] != (TableColumn{"data", "string(200)"}) {
		t.Errorf("round trip: %+v", c2.Tables.Define)
	}
}

func TestTablesErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"tables:\n  define:\n    t:\n      rows: 0\n      key: int\n      columns: { a: int8 }\n",
			"p.yaml:4: tables.define.t.rows: must be positive"},
		{"tables:\n  define:\n    t:\n      rows: 5\n      key: uuid\n      columns: { a: int8 }\n",
			`p.yaml:5: tables.define.t.key: unknown key type "uuid"`},
		{"tables:\n  define:\n    t:\n      rows: 5\n      key: int\n      columns:\n        a: int8\n        b: int128\n",
			`p.yaml:8: tables.define.t.columns.b: unknown type "int128"`},
		{"tables:\n  define:\n    t:\n      rows: 5\n      key: int\n      columns: { a: string(0) }\n",
			"p.yaml:6: tables.define.t.columns.a: string(N) needs N from 1 to 65535, got 0"},
		{"tables:\n  define:\n    t:\n      rows: 5\n      key: int\n      columns: { a: string(70000) }\n",
			"tables.define.t.columns.a: string(N) needs N from 1 to 65535"},
		{"tables:\n  define:\n    t:\n      rows: 5\n      key: string(300)\n      columns: { a: int8 }\n",
			"tables.define.t.key: a string key needs N from 1 to 255"},
		{"tables:\n  define:\n    t:\n      rows: 5\n      key: int\n      columns: { a: string(4), b: float }\n      indexes: [a]\n",
			`p.yaml:7: tables.define.t.indexes[0]: "a" is a string(4) column: indexes are on int columns`},
		{"tables:\n  define:\n    t:\n      rows: 5\n      key: int\n      columns: { a: int8 }\n      indexes: [zz]\n",
			`tables.define.t.indexes[0]: "zz" is not a column of t`},
		{"tables:\n  define:\n    t:\n      rows: 5\n      key: int\n      columns: { a: int8 }\n      size: 3\n",
			"p.yaml:7: tables.define.t.size: unknown key"},
		{"tables:\n  define:\n    t:\n      rows: 2000000000\n      key: int\n      columns: { a: string(60000) }\n",
			"tables.define: the tables need about"},
		{"tables:\n  init: php x.php\n", "tables.init: set without tables.define"},
	} {
		_, err := Parse("p.yaml", []byte(tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s\ngot  %v\nwant %s", tc.src, err, tc.want)
		}
	}
}
