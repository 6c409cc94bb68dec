package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"github.com/tokengate/tokengate/config"
	"github.com/tokengate/tokengate/pkg/policy"
)

// validate is `tokengate validate FILE`.
func validate(args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return errors.New("usage: tokengate validate FILE")
	}
	data, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	return policy.Validate(stdout, args[0], data)
}

// explain is `tokengate explain --policy FILE --domain D key=value ...`.
func explain(args []string, stdout io.Writer) error {
	fs := pflag.NewFlagSet("explain", pflag.ContinueOnError)
	file := fs.String("policy", "", "policy file (default: the built-in policy)")
	domain := fs.String("domain", "", "the Envoy rate_limit domain (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *domain == "" {
		return errors.New("explain: --domain is required")
	}
	entries, err := policy.ParseEntries(fs.Args())
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	name, data := config.DefaultName, config.Default
	if *file != "" {
		if data, err = os.ReadFile(*file); err != nil {
			return err
		}
		name = *file
	}
	p, err := policy.Parse(name, data)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, p.Explain(*domain, entries))
	return err
}
