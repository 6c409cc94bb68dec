// Command tokengate is the rate-limit service for Envoy.
//
//	tokengate [serve] [flags]                   run the service (the default)
//	tokengate validate FILE|DIR                 check a policy file or directory
//	tokengate explain --policy FILE --domain D key=value ...
//	                                            show which rule a descriptor matches
//	tokengate explain --policy FILE --front-door forward_auth --header X-User=alice --path /api/x
//	                                            show the descriptors a front door builds
//	tokengate simulate --policy FILE --trace FILE [--plot OUT.png] [--format text|json] [--compare FILE2] [--start RFC3339]
//	                                            replay a trace through a policy offline
//	tokengate import [-o FILE] [--on-store-error MODE] FILE|DIR
//	                                            write an envoyproxy/ratelimit config as a native policy
//	tokengate version                           print the version
//	tokengate help [COMMAND]                    list the commands, or one's flags
//	ratelimit                                   (invoked by that name) serve as envoyproxy/ratelimit,
//	                                            configured by its environment variables (compatenv.go)
//
// The subcommands are one table, commands; a new one joins it with one
// entry, and help, COMMAND --help and the dispatch follow.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"

	"github.com/tokengate/tokengate/internal/suggest"
)

// command is one subcommand of tokengate.
type command struct {
	name     string
	synopsis string // its arguments, after "tokengate NAME"
	summary  string // what it does, in one line
	// run runs it. A command parses its flags with parseFlags, so that
	// --help prints them (helpError) and exits 0.
	run func(args []string, stdout, stderr io.Writer) error
}

// commands are tokengate's subcommands, in the order help lists them.
var commands = []command{
	{"serve", "[flags]", "run the service (the default command)",
		func(args []string, _, stderr io.Writer) error { return serve(args, stderr) }},
	{"validate", "FILE|DIR", "check a policy file or directory, in either format; exit 1 with every problem",
		func(args []string, stdout, _ io.Writer) error { return validate(args, stdout) }},
	{"explain", "[flags] [key=value ...]", "show the rule a descriptor matches, or what a front door builds",
		func(args []string, stdout, _ io.Writer) error { return explain(args, stdout) }},
	{"simulate", "--policy FILE --trace FILE [flags]", "replay a trace through a policy on a simulated clock (--compare, --plot)",
		func(args []string, stdout, _ io.Writer) error { return simulateCmd(args, os.Stdin, stdout) }},
	{"import", "[-o FILE] [--on-store-error MODE] FILE|DIR", "write an envoyproxy/ratelimit config as a native policy; every difference in behaviour on stderr",
		importCmd},
	{"version", "", "print the version",
		func(args []string, stdout, _ io.Writer) error { return printVersion(args, stdout) }},
}

// main runs tokengate's commands or, invoked by the name ratelimit (the
// image's /bin/ratelimit), envoyproxy/ratelimit's process (compatenv.go).
func main() {
	if filepath.Base(os.Args[0]) == "ratelimit" {
		os.Exit(runAsReference(os.Args[1:], os.Environ(), os.Stderr))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a subcommand and returns the exit code: 0, or 1 with the
// error on stderr. Asked for help (help, -h, --help, COMMAND --help) it
// prints it on stdout and returns 0.
func run(args []string, stdout, stderr io.Writer) int {
	name := "serve"
	if len(args) > 0 {
		switch a := args[0]; {
		case a == "help" || a == "-h" || a == "--help":
			return runHelp(args[1:], stdout, stderr)
		case a == "--version":
			name, args = "version", args[1:]
		case !strings.HasPrefix(a, "-"):
			name, args = a, args[1:]
		}
	}
	c, ok := lookup(name)
	if !ok {
		fmt.Fprintf(stderr, "tokengate: unknown command %q%s\n\n", name, suggest.Hint(name, commandNames()))
		writeUsage(stderr)
		return 1
	}
	err := c.run(args, stdout, stderr)
	var help helpError
	switch {
	case errors.As(err, &help):
		writeCommandHelp(stdout, c, help)
		return 0
	case err != nil:
		fmt.Fprintln(stderr, "tokengate:", err)
		return 1
	}
	return 0
}

// runHelp is `tokengate help [COMMAND]`.
func runHelp(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		writeUsage(stdout)
		return 0
	case len(args) > 1:
		fmt.Fprintf(stderr, "tokengate: help takes one command, got %q\n", args)
		return 1
	}
	if _, ok := lookup(args[0]); !ok {
		fmt.Fprintf(stderr, "tokengate: help: unknown command %q%s\n\n", args[0], suggest.Hint(args[0], commandNames()))
		writeUsage(stderr)
		return 1
	}
	return run([]string{args[0], "--help"}, stdout, stderr)
}

func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// commandNames are the names run dispatches, help's among them.
func commandNames() []string {
	names := []string{"help"}
	for _, c := range commands {
		names = append(names, c.name)
	}
	return names
}

// writeUsage lists the commands.
func writeUsage(w io.Writer) {
	fmt.Fprint(w, "tokengate is the rate-limit service for Envoy (ratelimit.v3, ext_authz, forward-auth).\n\nusage:\n")
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  tokengate %s %s\t%s\n", c.name, c.synopsis, c.summary)
	}
	fmt.Fprintf(tw, "  tokengate help [COMMAND]\tlist the commands, or one command's flags\n")
	fmt.Fprintf(tw, "  tokengate COMMAND --help\tone command's flags\n")
	fmt.Fprintf(tw, "  tokengate --version\tprint the version\n")
	tw.Flush()
	fmt.Fprint(w, "\nWithout a command, tokengate serves: tokengate --policy FILE is tokengate serve --policy FILE.\n")
	fmt.Fprint(w, "Invoked as ratelimit (a link, as the image's /bin/ratelimit), it serves as envoyproxy/ratelimit,\nconfigured by that service's environment variables alone (README: Migrating from envoyproxy/ratelimit).\n")
}

// helpError is what a command returns when asked for --help: run prints
// its usage, with the flags of flags and then notes, and exits 0.
type helpError struct {
	flags *pflag.FlagSet
	notes string
}

func (helpError) Error() string { return "help requested" }

func writeCommandHelp(w io.Writer, c command, h helpError) {
	fmt.Fprintf(w, "usage: tokengate %s %s\n\n%s\n", c.name, c.synopsis, c.summary)
	if h.flags != nil && h.flags.HasFlags() {
		fmt.Fprintf(w, "\nflags:\n%s", h.flags.FlagUsages())
	}
	if h.notes != "" {
		fmt.Fprintf(w, "\n%s", h.notes)
	}
}

// withNotes adds notes to the help of a helpError; any other err is
// returned as it is.
func withNotes(err error, notes string) error {
	if h, ok := err.(helpError); ok {
		h.notes = notes
		return h
	}
	return err
}

// parseFlags parses args into fs, quietly: -h or --help is a helpError,
// an unknown flag near one of fs's an error that names that one, and any
// other bad flag an error that says where the flags are listed.
func parseFlags(fs *pflag.FlagSet, args []string) error {
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	var unknown *pflag.NotExistError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pflag.ErrHelp):
		return helpError{flags: fs}
	case errors.As(err, &unknown) && unknown.GetSpecifiedShortnames() == "":
		var names []string
		fs.VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
		if near, ok := suggest.Nearest(unknown.GetSpecifiedName(), names); ok {
			return fmt.Errorf("%s: %w (did you mean --%s?)", fs.Name(), err, near)
		}
	}
	return fmt.Errorf("%s: %w (tokengate %s --help lists the flags)", fs.Name(), err, fs.Name())
}
