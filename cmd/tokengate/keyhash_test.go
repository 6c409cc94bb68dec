package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/pkg/keyhash"
)

// TestKeyHashSecret: the secret comes from the file or the variable (or
// the settings file's key), trailing newlines dropped; too short a secret,
// or both, stop the start naming the setting.
func TestKeyHashSecret(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef"
	dir := t.TempDir()
	file := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	want, _ := keyhash.New([]byte(secret))
	bucket := []byte("\x04edge\x08per-user\x0a192.0.2.1")
	for _, tc := range []struct {
		name       string
		env        map[string]string
		args       []string
		err        string // a part of it; "" none
		random     bool   // no secret: the start log says so
		sameAsWant bool
	}{
		{name: "file", args: []string{"--key-hash-secret-file", file("s", secret)}, sameAsWant: true},
		{name: "file written by echo", args: []string{"--key-hash-secret-file", file("echo", secret+"\r\n")}, sameAsWant: true},
		{name: "variable of the file", env: map[string]string{"TOKENGATE_KEY_HASH_SECRET_FILE": file("v", secret)}, sameAsWant: true},
		{name: "variable", env: map[string]string{"TOKENGATE_KEY_HASH_SECRET": secret}, sameAsWant: true},
		{name: "settings file", args: []string{"--config", file("settings.yaml", "key-hash-secret: "+secret+"\n")}, sameAsWant: true},
		{name: "another secret", args: []string{"--key-hash-secret-file", file("o", strings.ToUpper(secret))}},
		{name: "none", random: true},
		{name: "short file", args: []string{"--key-hash-secret-file", file("short", "fifteen bytes!!\n")},
			err: "--key-hash-secret-file " + filepath.Join(dir, "short") + ": the secret is 15 bytes: want at least 16"},
		{name: "short variable", env: map[string]string{"TOKENGATE_KEY_HASH_SECRET": "short"},
			err: "TOKENGATE_KEY_HASH_SECRET (or the settings file's key-hash-secret): the secret is 5 bytes"},
		{name: "empty file", args: []string{"--key-hash-secret-file", file("empty", "\n")}, err: "the secret is 0 bytes"},
		{name: "missing file", args: []string{"--key-hash-secret-file", filepath.Join(dir, "nope")}, err: "--key-hash-secret-file: open "},
		{name: "both", args: []string{"--key-hash-secret-file", file("b", secret)}, env: map[string]string{"TOKENGATE_KEY_HASH_SECRET": secret},
			err: "are both set: give one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			s, err := loadSettings(tc.args)
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			k, err := serveKeyHash(s, slog.New(slog.NewTextHandler(&logs, nil)))
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if said := strings.Contains(logs.String(), msgRandomKeyHash); said != tc.random || strings.Count(logs.String(), "\n") > 1 {
				t.Errorf("start log %q: random secret said %v, want %v", logs.String(), said, tc.random)
			}
			if same := k.Hash(bucket) == want.Hash(bucket); same != tc.sameAsWant {
				t.Errorf("the same name as under the secret: %v, want %v", same, tc.sameAsWant)
			}
		})
	}
}

// TestKeyHashSecretNotAFlag: the secret itself is never a flag (the
// process list would show it).
func TestKeyHashSecretNotAFlag(t *testing.T) {
	if _, err := loadSettings([]string{"--key-hash-secret", "0123456789abcdef"}); err == nil {
		t.Fatal("--key-hash-secret accepted as a flag")
	}
}
