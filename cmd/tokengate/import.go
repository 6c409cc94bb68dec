package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"github.com/tokengate/tokengate/pkg/policy"
)

// importCmd is `tokengate import [-o FILE] [--on-store-error MODE] FILE|DIR`:
// an envoyproxy/ratelimit configuration (a file, or a directory of them)
// written as a native policy that decides the same, on stdout or to FILE,
// every rule's on_store_error written out (MODE, local by default), with
// every semantic difference from the reference reported on stderr.
func importCmd(args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("import", pflag.ContinueOnError)
	out := fs.StringP("output", "o", "", "write the native policy to this file instead of stdout")
	charge := fs.String("reference-charge", policy.EveryHit.String(), "as serve --reference-charge: every_hit, every hit counted, as envoyproxy/ratelimit counts; stop_when_over, only the descriptors that go over counted when one does, as it counts with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true; before_request, a refused request charges nothing")
	onStoreError := fs.String("on-store-error", "local", "on_store_error written on every rule: what it answers while Redis fails or stalls (local, deny or allow; serve's --on-store-error)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	refCharge, err := referenceCharge(*charge)
	if err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: tokengate import [-o FILE] [--on-store-error MODE] FILE|DIR")
	}
	mode, err := settings{OnStoreError: *onStoreError}.storeErrorMode()
	if err != nil {
		return err
	}
	path := fs.Arg(0)
	files, err := policy.ReadFiles(path)
	if err != nil {
		return err
	}
	for _, f := range files {
		if !policy.IsReference(f.Data) {
			return fmt.Errorf("import: %s is not in envoyproxy/ratelimit's format (no top-level domain)", f.Name)
		}
	}
	c := policy.Compiler{ReferenceCharge: refCharge, OnStoreError: &mode}
	p, err := c.CompileFiles(path, files, nil, 0)
	if err != nil {
		return err
	}
	data, err := p.NativeYAML()
	if err != nil {
		return err
	}
	data = append([]byte("# tokengate policy imported from "+path+" (envoyproxy/ratelimit format) by `tokengate import`.\n"), data...)
	if *out != "" {
		err = os.WriteFile(*out, data, 0o644)
	} else {
		_, err = stdout.Write(data)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "tokengate import: %s: how the imported policy answers differently from envoyproxy/ratelimit:\n", path)
	for _, line := range p.ImportReport() {
		fmt.Fprintf(stderr, "  - %s\n", line)
	}
	return nil
}
