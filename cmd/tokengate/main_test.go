package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSettingsPrecedence(t *testing.T) {
	t.Setenv("TOKENGATE_GRPC_ADDR", "127.0.0.1:9001")
	t.Setenv("TOKENGATE_MAX_BUCKETS", "42")
	t.Setenv("TOKENGATE_SHUTDOWN_TIMEOUT", "3s")
	file := filepath.Join(t.TempDir(), "settings.yaml")
	if err := os.WriteFile(file, []byte("http-addr: 127.0.0.1:9002\nmax-buckets: 7\nlog-format: text\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := loadSettings([]string{"--config", file, "--max-buckets", "99"})
	if err != nil {
		t.Fatal(err)
	}
	want := settings{GRPCAddr: "127.0.0.1:9001", HTTPAddr: "127.0.0.1:9002", MaxBuckets: 99, LogFormat: "text", ShutdownTimeout: 3 * time.Second}
	if s.GRPCAddr != want.GRPCAddr || s.HTTPAddr != want.HTTPAddr || s.MaxBuckets != want.MaxBuckets ||
		s.LogFormat != want.LogFormat || s.ShutdownTimeout != want.ShutdownTimeout || s.Store != "memory" {
		t.Fatalf("got %+v", s)
	}
}

func TestSettingsRefuseBadValues(t *testing.T) {
	for _, args := range [][]string{
		{"--store", "etcd"}, {"--max-buckets", "0"}, {"--log-format", "xml"}, {"--log-level", "loud"},
		{"--janitor-interval", "0s"}, {"--no-such-flag"}, {"extra-argument"},
		{"--grpc-max-recv-bytes", "100"}, {"--grpc-max-recv-bytes", "1000000000"},
	} {
		if _, err := loadSettings(args); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}

func TestValidateAndExplain(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte("domains:\n  edge:\n    - name: u\n      match: [{key: user_id}]\n      capacity: 5\n      refill: 1/s\n"), 0o644)
	os.WriteFile(bad, []byte("domains:\n  edge:\n    - name: u\n      match: [{key: user_id}]\n      capacity: -1\n      refill: 1/q\n"), 0o644)

	var out, errOut bytes.Buffer
	if code := run([]string{"validate", good}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "OK: revision 0, 1 domain") {
		t.Fatalf("validate good: exit %d, %q %q", code, out.String(), errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := run([]string{"validate", bad}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "bad.yaml:5") || !strings.Contains(errOut.String(), "bad.yaml:6") {
		t.Fatalf("validate bad: exit %d, stderr %q", code, errOut.String())
	}
	out.Reset()
	if code := run([]string{"explain", "--policy", good, "--domain", "edge", "user_id=alice"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), `matches rule "u"`) {
		t.Fatalf("explain: exit %d, %q", code, out.String())
	}
	out.Reset()
	if code := run([]string{"explain", "--domain", "edge", "path=/healthz"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "health-checks") {
		t.Fatalf("explain on the built-in policy: exit %d, %q", code, out.String())
	}
	if code := run([]string{"frobnicate"}, &out, &errOut); code != 1 {
		t.Fatalf("unknown command: exit %d", code)
	}
}
