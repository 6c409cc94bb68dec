// Package docker_test checks the Dockerfile without a Docker engine: the
// build stage's `go build` command, run as written on exactly the files
// .dockerignore lets into the build context, makes a static, stripped
// binary that knows its version; the build stage's link makes /bin/ratelimit
// run it as envoyproxy/ratelimit; the runtime stage is distroless, non-root
// and exposes both ports.
package docker_test

import (
	"bytes"
	"debug/elf"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"

	"github.com/tokengate/tokengate/internal/tgproc"
	"github.com/tokengate/tokengate/tools/internal/build"
)

// instructions reads the Dockerfile's instructions, one per element,
// without comments and with continuation lines joined.
func instructions(t *testing.T) []string {
	data, err := os.ReadFile(filepath.Join(build.Root(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\") + " ")
			continue
		}
		cur.WriteString(line)
		out = append(out, cur.String())
		cur.Reset()
	}
	return out
}

// TestRuntimeStage: the image tokengate runs in.
func TestRuntimeStage(t *testing.T) {
	ins := instructions(t)
	last := -1
	for i, in := range ins {
		if strings.HasPrefix(in, "FROM ") {
			last = i
		}
	}
	if last < 0 || ins[last] != "FROM gcr.io/distroless/static-debian12:nonroot" {
		t.Fatalf("runtime stage %q: want distroless static, nonroot", ins[last])
	}
	stage := ins[last:]
	for _, want := range []string{
		"COPY --from=build /out/tokengate /tokengate",
		"COPY --from=build /out/bin /bin", // /bin/ratelimit (TestRatelimitLink)
		"USER 65532:65532",
		"EXPOSE 8081 8080",
		`ENTRYPOINT ["/tokengate"]`,
	} {
		if !slices.Contains(stage, want) {
			t.Errorf("the runtime stage lacks %q", want)
		}
	}
}

// TestBuildStage runs the build stage's go build command on a copy of the
// build context and checks the binary.
func TestBuildStage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds tokengate")
	}
	var build string
	for _, in := range instructions(t) {
		if strings.HasPrefix(in, "RUN ") && strings.Contains(in, "go build") {
			build = strings.TrimPrefix(in, "RUN ")
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", `-ldflags "-s -w -X main.version=${VERSION}"`, "-o /out/tokengate", "./cmd/tokengate"} {
		if !strings.Contains(build, want) {
			t.Fatalf("build command %q lacks %q", build, want)
		}
	}
	ctx := buildContext(t)
	out := t.TempDir()
	cmd := exec.Command("sh", "-c", strings.ReplaceAll(build, "/out/", out+"/"))
	cmd.Dir = ctx
	cmd.Env = append(os.Environ(), "VERSION=v9.8.7-docker", "TARGETOS="+runtime.GOOS, "TARGETARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, b)
	}
	bin := filepath.Join(out, "tokengate")

	v, err := exec.Command(bin, "version").Output()
	if err != nil || strings.TrimSpace(string(v)) != "tokengate v9.8.7-docker" {
		t.Errorf("tokengate version: %q, %v", v, err)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Skipf("not ELF (%v): cannot check linking", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("dynamically linked: distroless/static has no libc")
		}
	}
	for _, s := range []string{".symtab", ".debug_info"} {
		if f.Section(s) != nil {
			t.Errorf("section %s: not stripped (-s -w)", s)
		}
	}
}

// buildContext copies into a temporary directory what Docker would send
// as the build context: the repository less what .dockerignore excludes.
func buildContext(t *testing.T) string {
	root := build.Root(t)
	data, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	patterns, err := ignorefile.ReadAll(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	var copied int
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if rel == "." || d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		excluded, err := pm.MatchesOrParentMatches(filepath.ToSlash(rel))
		if err != nil || excluded || !d.Type().IsRegular() {
			return err
		}
		copied++
		return copyFile(path, filepath.Join(dst, rel))
	})
	if err != nil {
		t.Fatal(err)
	}
	if copied == 0 {
		t.Fatal("empty build context")
	}
	return dst
}

func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// TestRatelimitLink runs the build stage's command that makes
// /bin/ratelimit, checks that it is a link to /tokengate, and that the
// binary run through a link of that name is envoyproxy/ratelimit's process
// (configured by its environment: here one it refuses, naming the
// variable).
func TestRatelimitLink(t *testing.T) {
	if testing.Short() {
		t.Skip("builds tokengate")
	}
	var link string
	for _, in := range instructions(t) {
		if strings.HasPrefix(in, "RUN ") && strings.Contains(in, "ratelimit") {
			link = strings.TrimPrefix(in, "RUN ")
		}
	}
	if link == "" {
		t.Fatal("no RUN makes /bin/ratelimit")
	}
	out := t.TempDir()
	if b, err := exec.Command("sh", "-c", strings.ReplaceAll(link, "/out/", out+"/")).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", link, err, b)
	}
	if target, err := os.Readlink(filepath.Join(out, "bin", "ratelimit")); err != nil || target != "/tokengate" {
		t.Fatalf("bin/ratelimit: %q, %v; want a link to /tokengate", target, err)
	}

	cmd := tgproc.CommandAs(t, build.Tokengate(t), "ratelimit", "RUNTIME_SUBDIRECTORY=ratelimit", "BACKEND_TYPE=memcache")
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), `BACKEND_TYPE="memcache"`) {
		t.Fatalf("ratelimit with BACKEND_TYPE=memcache: %v\n%s", err, b)
	}
}
