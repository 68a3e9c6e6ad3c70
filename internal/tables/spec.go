package tables

import (
	"fmt"

	"github.com/peregrinephp/peregrine/internal/config"
)

// Specs turns tables.define into Specs. The config has been validated, so an error here is a
// type the layout does not know.
func Specs(defs []config.TableDef) ([]Spec, error) {
	specs := make([]Spec, 0, len(defs))
	for _, d := range defs {
		s := Spec{Name: d.Name, Capacity: d.Rows, Indexes: d.Indexes}
		kind, n, err := config.ParseKeyType(d.Key)
		if err != nil {
			return nil, fmt.Errorf("tables.define.%s.key: %w", d.Name, err)
		}
		if kind == "string" {
			s.KeySize = n
		}
		for _, c := range d.Columns {
			kind, n, err := config.ParseColumnType(c.Type)
			if err != nil {
				return nil, fmt.Errorf("tables.define.%s.columns.%s: %w", d.Name, c.Name, err)
			}
			t, err := ParseType(kind)
			if err != nil {
				return nil, err
			}
			s.Columns = append(s.Columns, Column{Name: c.Name, Type: t, Size: n})
		}
		specs = append(specs, s)
	}
	return specs, nil
}
