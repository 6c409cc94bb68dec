// Command tokengate is the rate-limit service for Envoy.
//
//	tokengate [serve] [flags]                   run the service (the default)
//	tokengate validate FILE                     check a policy file
//	tokengate explain --policy FILE --domain D key=value ...
//	                                            show which rule a descriptor matches
//	tokengate explain --policy FILE --front-door forward_auth --header X-User=alice --path /api/x
//	                                            show the descriptors a front door builds
//	tokengate version                           print the version
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = ""

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run dispatches a subcommand and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "serve":
		err = serve(args, stderr)
	case "validate":
		err = validate(args, stdout)
	case "explain":
		err = explain(args, stdout)
	case "import":
		err = importCmd(args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "tokengate", versionString())
	case "help":
		fmt.Fprint(stdout, usage)
	default:
		err = fmt.Errorf("unknown command %q\n%s", cmd, usage)
	}
	if err != nil {
		fmt.Fprintln(stderr, "tokengate:", err)
		return 1
	}
	return 0
}

const usage = `usage:
  tokengate [serve] [flags]        run the service (tokengate serve --help lists the flags)
  tokengate validate FILE          check a policy file; exit 1 with every problem
  tokengate explain --policy FILE --domain DOMAIN key=value ...
                                   show which rule a descriptor matches, its key and cost
  tokengate explain --policy FILE --front-door ext_authz|forward_auth [--domain DOMAIN]
        [--remote-address IP] [--method M] [--path P] [--host H] [--scheme S] [--header Name=value ...]
                                   show the descriptors a front door builds for a request
                                   and the rule each one hits
  tokengate import [-o FILE] FILE|DIR
                                   write an envoyproxy/ratelimit config as a native policy,
                                   every difference in behaviour on stderr
  tokengate version                print the version
`

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
