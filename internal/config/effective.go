package config

import (
	"bytes"

	"gopkg.in/yaml.v3"
)

// EffectiveYAML returns c as a configuration file in the documented layout, every key present
// with its value or default, sizes and durations in their human form (8MiB, 10s). Parse reads it
// back to c. An empty workers.command is left out, with a comment in its place, since an empty
// command in a file is an error. peregrine config check prints it.
func (c Config) EffectiveYAML() []byte {
	root := &yaml.Node{Kind: yaml.MappingNode}
	for _, s := range schema(&c) {
		m := &yaml.Node{Kind: yaml.MappingNode}
		comment := ""
		for _, k := range s.keys {
			v := k.encode()
			if v == nil {
				comment = k.name + ": not set; pass a worker script to peregrine serve or set it here"
				continue
			}
			kn := keyNode(k.name)
			kn.HeadComment, comment = comment, ""
			m.Content = append(m.Content, kn, v)
		}
		root.Content = append(root.Content, keyNode(s.name), m)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		// The tree is built above from strings alone; yaml.v3 fails only on malformed trees.
		panic("config: encoding the effective configuration: " + err.Error())
	}
	if err := enc.Close(); err != nil {
		panic("config: encoding the effective configuration: " + err.Error())
	}
	return buf.Bytes()
}
