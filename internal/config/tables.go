package config

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"gopkg.in/yaml.v3"
)

// Tables configures the shared-memory tables every worker sees (the tables section; see
// docs/tables.md).
type Tables struct {
	// Init is a command run once after the tables are created and before any worker starts, to
	// fill them: a PHP script run like workers.command (under workers.runtime, in workers.dir,
	// with the workers' environment). Written as workers.command is. A non-zero exit fails the
	// start, with its output. Default none.
	Init []string `yaml:"init"`

	// Define lists the tables, in the order of the file, each under its name. Default none.
	Define []TableDef `yaml:"define"`
}

// TableDef is one table of tables.define.
type TableDef struct {
	// Name is the table's name, the key under tables.define: letters, digits and _, at most 63
	// bytes.
	Name string
	// Rows is the fixed capacity; a set() of a new key into a full table throws. Must be
	// positive, at most 2147483647.
	Rows int `yaml:"rows"`
	// Key is the key's type: int (a 64-bit integer) or string(N), N from 1 to 255 bytes.
	Key string `yaml:"key"`
	// Columns are the row's columns in the order of the file: int8, int16, int32, int64, float
	// (a double) or string(N), N from 1 to 65535 bytes. At least one, at most 32.
	Columns []TableColumn `yaml:"columns"`
	// Indexes names int columns with a non-unique index, for where(column, value). At most 8.
	Indexes []string `yaml:"indexes"`
}

// TableColumn is one column of a table: its name and its type as written (int32, string(16)).
type TableColumn struct {
	Name string
	Type string
}

// Limits of a table definition, shared with the segment's layout (internal/tables).
const (
	MaxTableName     = 63
	MaxTableColumns  = 32
	MaxTableIndexes  = 8
	MaxTableRows     = 1<<31 - 1
	MaxTableKeyBytes = 255
	MaxColumnBytes   = 65535
)

var (
	tableName  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	stringType = regexp.MustCompile(`^string\((\d+)\)$`)
	intTypes   = map[string]int{"int8": 1, "int16": 2, "int32": 4, "int64": 8}
)

// ParseColumnType parses a column type: int8, int16, int32, int64, float or string(N). It
// returns the type's name without the size (string for string(N)) and its size in bytes.
func ParseColumnType(s string) (kind string, size int, err error) {
	if n, ok := intTypes[s]; ok {
		return s, n, nil
	}
	if s == "float" {
		return s, 8, nil
	}
	if m := stringType.FindStringSubmatch(s); m != nil {
		n, err := strconv.Atoi(m[1])
		if err != nil || n < 1 || n > MaxColumnBytes {
			return "", 0, fmt.Errorf("string(N) needs N from 1 to %d, got %s", MaxColumnBytes, m[1])
		}
		return "string", n, nil
	}
	return "", 0, fmt.Errorf("unknown type %q: want int8, int16, int32, int64, float or string(N)", s)
}

// ParseKeyType parses a key type: int or string(N). It returns int or string and, for a
// string, N.
func ParseKeyType(s string) (kind string, size int, err error) {
	if s == "int" {
		return s, 8, nil
	}
	if m := stringType.FindStringSubmatch(s); m != nil {
		n, err := strconv.Atoi(m[1])
		if err != nil || n < 1 || n > MaxTableKeyBytes {
			return "", 0, fmt.Errorf("a string key needs N from 1 to %d, got %s", MaxTableKeyBytes, m[1])
		}
		return "string", n, nil
	}
	return "", 0, fmt.Errorf("unknown key type %q: want int or string(N)", s)
}

// EstimatedBytes is about what the table takes in shared memory, for validation; the exact
// figure is internal/tables' layout.
func (t TableDef) EstimatedBytes() int64 {
	row := int64(8 + 1 + 4*(1+len(t.Indexes)))
	if kind, n, err := ParseKeyType(t.Key); err == nil && kind == "string" {
		row += int64(n) - 6
	}
	for _, c := range t.Columns {
		if kind, n, err := ParseColumnType(c.Type); err == nil {
			if kind == "string" {
				n += 2
			}
			row += int64(n)
		}
	}
	return int64(t.Rows) * (row + 4*int64(1+len(t.Indexes)))
}

// validate checks the tables section.
func (t *Tables) validate() []*Error {
	var errs []*Error
	add := func(key, format string, args ...any) {
		errs = append(errs, &Error{Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	if len(t.Init) > 0 && len(t.Define) == 0 {
		add("tables.init", "set without tables.define: there is no table to fill")
	}
	var total int64
	for i, d := range t.Define {
		p := "tables.define." + d.Name
		switch {
		case !tableName.MatchString(d.Name) || len(d.Name) > MaxTableName:
			add(p, "a table name is letters, digits and _, not starting with a digit, at most %d bytes", MaxTableName)
		case slices.ContainsFunc(t.Define[:i], func(o TableDef) bool { return o.Name == d.Name }):
			add(p, "defined twice")
		}
		switch {
		case d.Rows <= 0:
			add(p+".rows", "must be positive: the table's fixed capacity in rows, got %d", d.Rows)
		case d.Rows > MaxTableRows:
			add(p+".rows", "at most %d, got %d", MaxTableRows, d.Rows)
		}
		if d.Key == "" {
			add(p+".key", "missing: want int or string(N)")
		} else if _, _, err := ParseKeyType(d.Key); err != nil {
			add(p+".key", "%v", err)
		}
		switch {
		case len(d.Columns) == 0:
			add(p+".columns", "missing: give at least one column, e.g. { hits: int64 }")
		case len(d.Columns) > MaxTableColumns:
			add(p+".columns", "at most %d columns, got %d", MaxTableColumns, len(d.Columns))
		}
		for _, c := range d.Columns {
			cp := p + ".columns." + c.Name
			if !tableName.MatchString(c.Name) || len(c.Name) > 31 {
				add(cp, "a column name is letters, digits and _, not starting with a digit, at most 31 bytes")
			}
			if _, _, err := ParseColumnType(c.Type); err != nil {
				add(cp, "%v", err)
			}
		}
		if len(d.Indexes) > MaxTableIndexes {
			add(p+".indexes", "at most %d indexes, got %d", MaxTableIndexes, len(d.Indexes))
		}
		for j, ix := range d.Indexes {
			ip := p + ".indexes[" + strconv.Itoa(j) + "]"
			k := slices.IndexFunc(d.Columns, func(c TableColumn) bool { return c.Name == ix })
			switch {
			case k < 0:
				add(ip, "%q is not a column of %s", ix, d.Name)
			case !strings.HasPrefix(d.Columns[k].Type, "int"):
				add(ip, "%q is a %s column: indexes are on int columns (int8, int16, int32, int64)", ix, d.Columns[k].Type)
			case slices.Index(d.Indexes, ix) < j:
				add(ip, "%q is listed twice", ix)
			}
		}
		total += d.EstimatedBytes()
	}
	if total > 0 {
		var si syscall.Sysinfo_t
		if err := syscall.Sysinfo(&si); err == nil {
			if ram := int64(si.Totalram) * int64(si.Unit); total > ram {
				add("tables.define", "the tables need about %s of shared memory, more than this machine's %s: lower their rows",
					Size(total), Size(ram))
			}
		}
	}
	return errs
}

// initKey reads tables.init as commandKey reads a command, except that null means none.
func initKey(name string, p *[]string) key {
	k := commandKey(name, p)
	decode := k.decode
	k.decode = func(d *decoder, v *yaml.Node, path string) {
		if !isNull(resolve(v)) {
			decode(d, v, path)
		}
	}
	encode := k.encode
	k.encode = func() *yaml.Node {
		if len(*p) == 0 {
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "~"}
		}
		return encode()
	}
	return k
}

// tablesDefineKey reads tables.define: a mapping of table names to {rows, key, columns,
// indexes}, columns a mapping of names to types, in file order.
func tablesDefineKey(name string, p *[]TableDef) key {
	return key{name,
		func(d *decoder, v *yaml.Node, path string) {
			var defs []TableDef
			d.mapping(v, path, nil, func(tname string, v *yaml.Node) {
				def := TableDef{Name: tname}
				tp := path + "." + tname
				d.mapping(v, tp, []string{"rows", "key", "columns", "indexes"}, func(k string, v *yaml.Node) {
					switch k {
					case "rows":
						def.Rows, _ = d.int(v, tp+".rows")
					case "key":
						def.Key, _ = d.string(v, tp+".key")
					case "columns":
						d.stringMap(v, tp+".columns", func(c, typ string) {
							def.Columns = append(def.Columns, TableColumn{Name: c, Type: typ})
						})
					case "indexes":
						def.Indexes, _ = d.list(v, tp+".indexes")
					}
				})
				defs = append(defs, def)
			})
			*p = defs
		},
		func() *yaml.Node {
			m := &yaml.Node{Kind: yaml.MappingNode}
			for _, def := range *p {
				t := &yaml.Node{Kind: yaml.MappingNode}
				cols := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
				for _, c := range def.Columns {
					cols.Content = append(cols.Content, keyNode(c.Name), stringNode(c.Type))
				}
				ix := listNode(def.Indexes)
				ix.Style = yaml.FlowStyle
				t.Content = append(t.Content,
					keyNode("rows"), plainNode(strconv.Itoa(def.Rows)),
					keyNode("key"), stringNode(def.Key),
					keyNode("columns"), cols,
					keyNode("indexes"), ix)
				m.Content = append(m.Content, keyNode(def.Name), t)
			}
			if len(*p) == 0 {
				m.Style = yaml.FlowStyle
			}
			return m
		},
	}
}
