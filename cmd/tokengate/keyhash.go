package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/tokengate/tokengate/pkg/keyhash"
)

// msgRandomKeyHash is the start log's line when no secret is set.
const msgRandomKeyHash = "bucket keys in logs and metadata are hashed with a random secret: they differ between replicas; set --key-hash-secret-file to share one"

// keyHashKey is the secret bucket keys are hashed under where they are
// shown (pkg/keyhash): --key-hash-secret-file's content, else
// key-hash-secret's (the environment or the settings file), trailing
// newlines dropped, so that a file written by echo and a Kubernetes
// Secret of the same value agree; nil when neither is set. Too short a
// secret, or both, stop the start.
func keyHashKey(file, secret string) (*keyhash.Key, error) {
	var (
		b    []byte
		from string
	)
	switch {
	case file != "" && secret != "":
		return nil, errors.New("--key-hash-secret-file and " + envName("key-hash-secret") + " (or the settings file's key-hash-secret) are both set: give one")
	case file != "":
		var err error
		if b, err = os.ReadFile(file); err != nil {
			return nil, fmt.Errorf("--key-hash-secret-file: %w", err)
		}
		from = "--key-hash-secret-file " + file
	case secret != "":
		b, from = []byte(secret), envName("key-hash-secret")+" (or the settings file's key-hash-secret)"
	default:
		return nil, nil
	}
	k, err := keyhash.New(bytes.TrimRight(b, "\r\n"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w (head -c 32 /dev/urandom | base64 makes one)", from, err)
	}
	return k, nil
}

// serveKeyHash is serve's key: the settings', else a random one, which
// the start log says once.
func serveKeyHash(s settings, log *slog.Logger) (*keyhash.Key, error) {
	k, err := keyHashKey(s.KeyHashSecretFile, s.KeyHashSecret)
	if err != nil || k != nil {
		return k, err
	}
	log.Info(msgRandomKeyHash)
	return keyhash.Random(), nil
}
