package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"github.com/tokengate/tokengate/config"
	"github.com/tokengate/tokengate/pkg/frontdoor"
	"github.com/tokengate/tokengate/pkg/frontdoor/spec"
	"github.com/tokengate/tokengate/pkg/keyhash"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/rlqs"
)

// validate is `tokengate validate FILE|DIR`: a policy file or a directory
// of them, in either format.
func validate(args []string, stdout io.Writer) error {
	fs := pflag.NewFlagSet("validate", pflag.ContinueOnError)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: tokengate validate FILE|DIR")
	}
	path := fs.Arg(0)
	files, err := policy.ReadFiles(path)
	if err != nil {
		return err
	}
	if err := policy.ValidateFiles(stdout, path, files); err != nil {
		return err
	}
	// What RLQS, whose BucketIds have no order, meets differently.
	p, err := policy.ParseFiles(path, files)
	if err != nil {
		return err
	}
	for _, note := range rlqs.Reach(p) {
		if _, err := fmt.Fprintln(stdout, note); err != nil {
			return err
		}
	}
	return nil
}

// readPolicy compiles the policy file or directory at path, in either
// format, as validate reads it.
func readPolicy(path string) (*policy.Policy, error) {
	files, err := policy.ReadFiles(path)
	if err != nil {
		return nil, err
	}
	return policy.ParseFiles(path, files)
}

// explain is `tokengate explain --policy FILE --domain D key=value ...`,
// or, with --front-door, which descriptors a front door builds for a
// request and the rules they hit.
func explain(args []string, stdout io.Writer) error {
	fs := pflag.NewFlagSet("explain", pflag.ContinueOnError)
	file := fs.String("policy", "", "policy file or directory, in either format (default: the built-in policy)")
	domain := fs.String("domain", "", "the Envoy rate_limit domain (required without --front-door)")
	door := fs.String("front-door", "", "explain a request to a front door: ext_authz or forward_auth")
	quota := fs.Bool("rlqs", false, "the key=value entries are an RLQS BucketId (Envoy's rate_limit_quota filter), in any order: the rule it reaches and the assignment it gets")
	var a spec.Attributes
	fs.StringVar(&a.RemoteAddress, "remote-address", "", "with --front-door: the client address (after trusted_proxy_hops)")
	fs.StringVar(&a.Method, "method", "", "with --front-door: the request method")
	fs.StringVar(&a.Path, "path", "", "with --front-door: the request path and query, as sent (shown normalised)")
	fs.StringVar(&a.Host, "host", "", "with --front-door: the request host")
	fs.StringVar(&a.Scheme, "scheme", "", "with --front-door: http or https")
	headers := fs.StringArray("header", nil, "with --front-door: a request header, Name=value (repeatable)")
	secretFile := fs.String("key-hash-secret-file", "", "serve's --key-hash-secret-file: print each bucket's hashed key, as dynamic metadata and the decision log show it")
	if err := parseFlags(fs, args); err != nil {
		return withNotes(err, explainExamples)
	}
	keys, err := keyHashKey(*secretFile, "")
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	if *door == "" && *domain == "" {
		return errors.New("explain: --domain is required")
	}
	if *door != "" && *quota {
		return errors.New("explain: --rlqs explains a BucketId, not a request to a front door")
	}
	var entries []policy.Entry
	if *door == "" {
		var err error
		if entries, err = policy.ParseEntries(fs.Args()); err != nil {
			return fmt.Errorf("explain: %w", err)
		}
	} else if fs.NArg() > 0 {
		return fmt.Errorf("explain: with --front-door, describe the request with flags, not descriptor entries %q", fs.Args())
	}
	var p *policy.Policy
	if *file == "" {
		p, err = policy.Parse(config.DefaultName, config.Default)
	} else {
		p, err = readPolicy(*file)
	}
	if err != nil {
		return err
	}
	var assignment string
	if *quota {
		id := make(map[string]string, len(entries))
		for _, e := range entries {
			id[e.Key] = e.Value
		}
		if entries, assignment, err = rlqs.Explain(p, *domain, id); err != nil {
			return fmt.Errorf("explain: --rlqs: %w", err)
		}
	}
	if *door == "" {
		e := p.Explain(*domain, entries)
		hashKeys(keys, e)
		if _, err = fmt.Fprintln(stdout, e); err == nil && *quota {
			_, err = fmt.Fprintln(stdout, "rlqs: "+assignment)
		}
		return err
	}
	hs := cliHeaders{}
	for _, h := range *headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return fmt.Errorf("explain: --header %q: want Name=value", h)
		}
		hs[strings.ToLower(k)] = v
	}
	a.Headers = hs
	e, err := frontdoor.Explain(p, *door, *domain, &a)
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	for _, it := range e.Items {
		hashKeys(keys, it.Explanation)
	}
	_, err = fmt.Fprint(stdout, e)
	return err
}

// hashKeys names e's bucket as serve shows it, when e has a bucket and
// keys (the secret) are given.
func hashKeys(keys *keyhash.Key, e *policy.Explanation) {
	if keys != nil && e != nil && e.Key != nil {
		e.KeyHash = keys.Hash(e.Key)
	}
}

const explainExamples = `examples:
  tokengate explain --policy policy.yaml --domain edge user_id=alice path=/api/x
        the rule the descriptor matches, its bucket key and cost
  tokengate explain --key-hash-secret-file /etc/tokengate/key-hash-secret --domain edge user_id=alice
        the same, with the bucket's hashed key: the key in Envoy's metadata and the decision log
  tokengate explain --rlqs --domain edge path=/api/search user_id=alice
        the rule an RLQS BucketId reaches, in any order, and the assignment Envoy gets
  tokengate explain --policy policy.yaml --front-door forward_auth --header X-User=alice --path /api/x
        the descriptors forward_auth builds for that request and the rule each one hits
`

// cliHeaders are --header flags, by lower-case name.
type cliHeaders map[string]string

func (h cliHeaders) Header(name string) (string, bool) { v, ok := h[name]; return v, ok }
