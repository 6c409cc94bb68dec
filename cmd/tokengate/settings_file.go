package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pelletier/go-toml/v2/unstable"
	"go.yaml.in/yaml/v3"
)

// fileEntry is one key of a settings file, with its line. A value that is
// not one scalar (a list, a table) has err set instead of value; null (an
// empty YAML value) is unset, as an empty environment variable is. A
// TOML dotted key (redis.addr) is dotted, and no setting.
type fileEntry struct {
	key, value string
	line       int
	null       bool
	dotted     bool
	err        string
}

// readSettingsFile reads the flat key: value settings file at path, YAML or
// JSON (.yaml, .yml, .json) or TOML (.toml). Errors start with path.
func readSettingsFile(path string) ([]fileEntry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	switch ext := filepath.Ext(path); ext {
	case ".yaml", ".yml", ".json":
		return yamlEntries(path, data)
	case ".toml":
		return tomlEntries(path, data)
	default:
		return nil, fmt.Errorf("%s: want a .yaml, .yml, .json or .toml file, not %q", path, ext)
	}
}

// yamlEntries reads a YAML document (JSON is one) that is a mapping of
// settings.
func yamlEntries(path string, data []byte) ([]fileEntry, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil, nil // empty
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want key: value settings", path, root.Line)
	}
	var out []fileEntry
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		e := fileEntry{key: k.Value, line: k.Line}
		switch {
		case v.Kind == yaml.AliasNode:
			v = v.Alias
			fallthrough
		case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
			e.null = v.Tag == "!!null"
			e.value = v.Value
		case v.Kind == yaml.ScalarNode:
			e.value = v.Value
		default:
			e.err = "not a single value"
		}
		out = append(out, e)
	}
	return out, nil
}

// tomlEntries reads a TOML document of top-level key = value settings.
func tomlEntries(path string, data []byte) ([]fileEntry, error) {
	p := unstable.Parser{}
	p.Reset(data)
	var out []fileEntry
	for p.NextExpression() {
		ex := p.Expression()
		switch ex.Kind {
		case unstable.Comment:
			continue
		case unstable.KeyValue:
		default: // [table], [[array]]
			return nil, fmt.Errorf("%s:%d: a [table]: settings are top-level key = value lines", path, tomlLine(&p, ex))
		}
		keys := ex.Key()
		keys.Next()
		e := fileEntry{key: string(keys.Node().Data), line: p.Shape(keys.Node().Raw).Start.Line}
		for keys.Next() {
			e.key += "." + string(keys.Node().Data)
			e.dotted = true
		}
		switch v := ex.Value(); v.Kind {
		case unstable.String, unstable.Integer, unstable.Float, unstable.Bool:
			e.value = string(v.Data)
		default:
			e.err = "not a single value"
		}
		out = append(out, e)
	}
	if err := p.Error(); err != nil {
		var perr *unstable.ParserError
		if errors.As(err, &perr) && len(perr.Highlight) > 0 {
			return nil, fmt.Errorf("%s:%d: %s", path, p.Shape(p.Range(perr.Highlight)).Start.Line, perr.Message)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// tomlLine is the line of a table expression's first key.
func tomlLine(p *unstable.Parser, ex *unstable.Node) int {
	keys := ex.Key()
	if keys.Next() {
		return p.Shape(keys.Node().Raw).Start.Line
	}
	return 0
}
