package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the settings tables of docs/operations.md, docs/redis.md and docs/reference-format.md")

// TestREADMESettings: the two settings tables (the general one in
// docs/operations.md, the Redis store's in docs/redis.md) are
// settingsTable, written out, and the table of envoyproxy/ratelimit's
// variables in docs/reference-format.md is compatVars; -update rewrites them.
func TestREADMESettings(t *testing.T) {
	isRedis := func(name string) bool { return strings.HasPrefix(name, "redis-") }
	for _, tc := range []struct {
		file, block, body string
	}{
		{"operations.md", "settings", settingsMarkdown(func(name string) bool { return !isRedis(name) })},
		{"redis.md", "redis settings", settingsMarkdown(isRedis)},
		{"reference-format.md", "ratelimit environment", compatVarsMarkdown()},
	} {
		path := filepath.Join("..", "..", "docs", tc.file)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := replaceBlock(string(data), tc.block, tc.body)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if doc == string(data) {
			continue
		}
		if *update {
			if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s: the %s table differs from the code: go test ./cmd/tokengate -run TestREADMESettings -update", path, tc.block)
	}
}

// replaceBlock replaces what lies between the lines <!-- BEGIN block ... -->
// and <!-- END block --> of doc with body.
func replaceBlock(doc, block, body string) (string, error) {
	begin, end := "<!-- BEGIN "+block+" ", "<!-- END "+block+" -->\n"
	i := strings.Index(doc, begin)
	if i < 0 {
		return "", fmt.Errorf("no %q line", begin)
	}
	i += strings.Index(doc[i:], "\n") + 1
	j := strings.Index(doc[i:], end)
	if j < 0 {
		return "", fmt.Errorf("no %q line", end)
	}
	return doc[:i] + body + doc[i+j:], nil
}

// settingsMarkdown is the table of the settings whose name keep accepts.
func settingsMarkdown(keep func(name string) bool) string {
	var s settings
	bound := bindSettings(&s)
	var b strings.Builder
	b.WriteString("| flag | environment | default | meaning |\n| --- | --- | --- | --- |\n")
	for _, st := range settingsTable {
		if !keep(st.name) {
			continue
		}
		_, f, _ := bound.lookup(st.name)
		flagName := "(none)"
		if st.from&fromFlag != 0 {
			flagName = "`--" + st.name + "`"
		}
		env := "(none)"
		if st.from&fromEnv != 0 {
			env = "`" + envName(st.name) + "`"
		}
		def := ""
		if f.DefValue != "" {
			def = "`" + f.DefValue + "`"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", flagName, env, def, strings.ReplaceAll(st.help, "|", `\|`))
	}
	return b.String()
}

// compatVarsMarkdown is the table of envoyproxy/ratelimit's variables.
func compatVarsMarkdown() string {
	var b strings.Builder
	b.WriteString("| variable | default there | in tokengate |\n| --- | --- | --- |\n")
	for _, v := range compatVars {
		def := ""
		if v.def != "" {
			def = "`" + v.def + "`"
		}
		doc := v.doc
		switch v.kind {
		case compatInert:
			doc = "accepted, no effect (logged when set): " + doc
		case compatUnsupported:
			doc = "**not supported**, stops the start unless unset or at its default: " + doc
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", v.name, def, strings.ReplaceAll(doc, "|", `\|`))
	}
	return b.String()
}
