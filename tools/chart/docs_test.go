package chart_test

// The docs' Helm commands, run as the docs show them: the shell blocks
// between <!-- BEGIN helm NAME ... --> and <!-- END helm NAME --> lines
// of docs/operations.md and the chart's README, in order, as one session.
// docker build and kind load or docker push are recorded, not run (the
// tests have no Docker engine and no cluster); helm install and upgrade
// are rendered and linted through the SDK, and the image each deploys
// must be one the doc built and loaded or pushed before.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/strvals"

	"github.com/tokengate/tokengate/tools/internal/build"
)

// The docs whose Helm commands TestDocInstall runs.
var installDocs = []string{"docs/operations.md", "charts/tokengate/README.md"}

// imageRequired begins what the chart says when image.repository is not
// set; the docs quote it.
const imageRequired = "image.repository is not set, and no tokengate image is published"

// TestDocInstall: every marked block of the docs renders, in order, and
// deploys an image the doc built and made available; no helm command of
// a shell block escapes the markers.
func TestDocInstall(t *testing.T) {
	c := loadChart(t)
	for _, doc := range installDocs {
		t.Run(doc, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(build.Root(t), doc))
			if err != nil {
				t.Fatal(err)
			}
			blocks, err := helmBlocks(string(data))
			if err != nil {
				t.Fatal(err)
			}
			if len(blocks) == 0 {
				t.Fatal("no <!-- BEGIN helm ... --> block")
			}
			if !strings.Contains(strings.Join(strings.Fields(string(data)), " "), imageRequired) {
				t.Errorf("the doc does not quote the chart's refusal %q", imageRequired)
			}
			s := newSession(c)
			for _, b := range blocks {
				cmds, err := shellWords(b.body)
				if err != nil {
					t.Fatalf("block %s: %v", b.name, err)
				}
				for _, cmd := range cmds {
					if err := s.run(t, cmd); err != nil {
						t.Errorf("block %s: %s: %v", b.name, strings.Join(cmd, " "), err)
					}
				}
			}
		})
	}
}

// TestImageRequired: with no image.repository (the default) the chart
// does not render, and says why and what to run; what it says to run
// renders. (helm lint only logs a template's fail, as [INFO] Fail.)
func TestImageRequired(t *testing.T) {
	c := loadChart(t)
	for _, v := range []string{"", "image: {tag: dev}", `image: {digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}`} {
		_, err := renderRelease(t, c, releaseName, namespace, values(t, v))
		if err == nil || !strings.Contains(err.Error(), imageRequired) {
			t.Fatalf("values %q: render error %v, want %q", v, err, imageRequired)
		}
	}
	_, err := renderRelease(t, c, releaseName, namespace, nil)
	var advice []string
	for _, line := range strings.Split(err.Error(), "\n") {
		if cmd, ok := strings.CutPrefix(line, "  "); ok {
			advice = append(advice, cmd)
		}
	}
	cmds, err := shellWords(strings.Join(advice, "\n"))
	if err != nil || len(cmds) != 3 {
		t.Fatalf("the refusal's commands %q: %v", advice, err)
	}
	s := newSession(c)
	for _, cmd := range cmds {
		if err := s.run(t, cmd); err != nil {
			t.Errorf("the refusal says to run %s: %v", strings.Join(cmd, " "), err)
		}
	}
}

// block is a marked block's name and the lines inside its code fence.
type block struct{ name, body string }

// helmBlocks are the doc's <!-- BEGIN helm NAME ... --> blocks in order.
// A helm command in a shell block outside them is an error: it would be
// shown and never rendered.
func helmBlocks(doc string) ([]block, error) {
	var blocks []block
	var cur *block
	fence, lang := false, ""
	for i, line := range strings.Split(doc, "\n") {
		l := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(l, "<!-- BEGIN helm "):
			if cur != nil {
				return nil, fmt.Errorf("line %d: a block inside block %s", i+1, cur.name)
			}
			cur = &block{name: strings.Fields(l)[3]}
		case strings.HasPrefix(l, "<!-- END helm "):
			if cur == nil || strings.Fields(l)[3] != cur.name {
				return nil, fmt.Errorf("line %d: %s ends no open block", i+1, l)
			}
			blocks, cur = append(blocks, *cur), nil
		case strings.HasPrefix(l, "```"):
			fence, lang = !fence, strings.TrimPrefix(l, "```")
		case fence && cur != nil:
			cur.body += l + "\n"
		case fence && lang == "sh" && strings.HasPrefix(l, "helm "):
			return nil, fmt.Errorf("line %d: %q is outside every <!-- BEGIN helm --> block, so no test renders it", i+1, l)
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("block %s is not ended", cur.name)
	}
	return blocks, nil
}

// shellWords splits sh lines into commands and words as sh would (quotes,
// backslash-newline, comments), without expanding anything: `"$(git
// describe)"` stays one word.
func shellWords(text string) ([][]string, error) {
	var cmds [][]string
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	rs := []rune(text)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				w.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '\\' && i+1 < len(rs):
			i++
			if rs[i] != '\n' {
				w.WriteRune(rs[i])
				inWord = true
			}
		case r == '#' && !inWord:
			for i+1 < len(rs) && rs[i+1] != '\n' {
				i++
			}
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				words, inWord = append(words, w.String()), false
				w.Reset()
			}
			if r == '\n' && len(words) > 0 {
				cmds, words = append(cmds, words), nil
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unclosed %c", quote)
	}
	if inWord {
		words = append(words, w.String())
	}
	if len(words) > 0 {
		cmds = append(cmds, words)
	}
	return cmds, nil
}

// session is what the commands of one doc have done so far.
type session struct {
	c         *chart.Chart
	built     map[string]bool           // images docker build tagged
	available map[string]bool           // images loaded into kind or pushed
	releases  map[string]map[string]any // the values each release was rendered with
}

func newSession(c *chart.Chart) *session {
	return &session{c: c, built: map[string]bool{}, available: map[string]bool{}, releases: map[string]map[string]any{}}
}

// run does one command: records docker and kind, renders helm, skips
// kubectl; any other command, or a flag the test does not know, is an
// error, so that a doc cannot grow a step no test follows.
func (s *session) run(t *testing.T, cmd []string) error {
	switch {
	case len(cmd) > 2 && cmd[0] == "docker" && cmd[1] == "build":
		return s.dockerBuild(cmd[2:])
	case len(cmd) == 3 && cmd[0] == "docker" && cmd[1] == "push",
		len(cmd) == 4 && cmd[0] == "kind" && cmd[1] == "load" && cmd[2] == "docker-image":
		img := cmd[len(cmd)-1]
		if !s.built[img] {
			return fmt.Errorf("%s was not built before", img)
		}
		s.available[img] = true
		return nil
	case len(cmd) > 1 && cmd[0] == "helm" && (cmd[1] == "install" || cmd[1] == "upgrade"):
		return s.helm(t, cmd[1], cmd[2:])
	case cmd[0] == "kubectl":
		return nil
	}
	return fmt.Errorf("the test does not know this command")
}

func (s *session) dockerBuild(args []string) error {
	var tags []string
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-t", "--tag", "--build-arg":
			if i+1 == len(args) {
				return fmt.Errorf("%s without a value", args[i])
			}
			if args[i] != "--build-arg" {
				tags = append(tags, args[i+1])
			}
			i++
		case ".":
			if i != len(args)-1 {
				return fmt.Errorf("the context . is not the last argument")
			}
		default:
			return fmt.Errorf("docker build argument %q: the test knows -t, --build-arg and the context .", args[i])
		}
	}
	if len(tags) == 0 || args[len(args)-1] != "." {
		return fmt.Errorf("want -t IMAGE and the repository's root as the context")
	}
	for _, tag := range tags {
		s.built[tag] = true
	}
	return nil
}

// helm renders `helm install|upgrade NAME charts/tokengate FLAGS` as Helm
// would: --set values over the chart's, with --reuse-values over the
// release's last ones; then lints them and checks the image.
func (s *session) helm(t *testing.T, verb string, args []string) error {
	vals := map[string]any{}
	var pos []string
	ns, reuse := "default", false
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "-n", "--namespace", "--set":
			if i+1 == len(args) {
				return fmt.Errorf("%s without a value", a)
			}
			i++
			if a != "--set" {
				ns = args[i]
			} else if err := strvals.ParseInto(args[i], vals); err != nil {
				return fmt.Errorf("--set %s: %w", args[i], err)
			}
		case "--create-namespace":
		case "--reuse-values":
			reuse = true
		default:
			if strings.HasPrefix(a, "-") {
				return fmt.Errorf("helm flag %q: the test knows -n, --create-namespace, --set and --reuse-values", a)
			}
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 || pos[1] != "charts/tokengate" {
		return fmt.Errorf("want helm %s NAME charts/tokengate, not %q", verb, pos)
	}
	name := pos[0]
	if reuse {
		if verb != "upgrade" || s.releases[name] == nil {
			return fmt.Errorf("--reuse-values with no release %s installed before", name)
		}
		vals = chartutil.CoalesceTables(vals, s.releases[name])
	}
	o, err := renderRelease(t, s.c, name, ns, vals)
	if err != nil {
		return err
	}
	lintChart(t, vals)
	s.releases[name] = vals
	for _, ct := range append(o.Deployment.Spec.Template.Spec.InitContainers, o.Deployment.Spec.Template.Spec.Containers...) {
		if !s.available[ct.Image] {
			return fmt.Errorf("container %s runs image %s, which nothing before built and loaded into kind or pushed", ct.Name, ct.Image)
		}
	}
	return nil
}
