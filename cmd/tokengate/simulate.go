package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/tokengate/tokengate/pkg/clock"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/simulate"
)

// simulateCmd is `tokengate simulate --policy FILE --trace FILE [--plot
// OUT.png] [--format text|json] [--compare FILE2] [--start RFC3339]`: it
// replays a trace through the decision path on a simulated clock (package
// simulate).
func simulateCmd(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := pflag.NewFlagSet("simulate", pflag.ContinueOnError)
	file := fs.String("policy", "", "the policy file or directory, in either format, to replay the trace through (required)")
	tracePath := fs.String("trace", "", "the trace: CSV (t,domain,entries,hits) or JSON lines, - for standard input (required)")
	plotPath := fs.String("plot", "", "write a PNG of allowed and rejected per second and the hottest buckets' tokens")
	format := fs.String("format", "text", "text (a table) or json")
	compare := fs.String("compare", "", "a second policy file or directory, replayed side by side with --policy")
	maxBuckets := fs.Int("max-buckets", simulate.DefaultMaxBuckets, "the memory store's bucket cap, as tokengate serve's --max-buckets")
	hot := fs.Int("hot", 3, "with --plot: how many of the hottest buckets of each policy to draw")
	start := fs.String("start", "", "the wall time of the trace's t=0, RFC3339 (2026-03-28T12:00:00+01:00), where calendar budgets' periods are counted from (default 1970-01-01T00:00:00Z)")
	if err := parseFlags(fs, args); err != nil {
		return withNotes(err, simulateNotes)
	}
	switch {
	case *file == "" || *tracePath == "":
		return errors.New("simulate: --policy and --trace are required")
	case fs.NArg() > 0:
		return fmt.Errorf("simulate: unexpected arguments %q", fs.Args())
	case *format != "text" && *format != "json":
		return fmt.Errorf("simulate: --format %q: want text or json", *format)
	}
	var anchor clock.Anchor
	if *start != "" {
		t, err := time.Parse(time.RFC3339Nano, *start)
		if err != nil {
			return fmt.Errorf("simulate: --start %q: want an RFC 3339 time, such as 2026-03-28T12:00:00+01:00", *start)
		}
		anchor = clock.AnchorAt(t, 0)
	}
	files := []string{*file}
	if *compare != "" {
		files = append(files, *compare)
	}
	pols := make([]*policy.Policy, len(files))
	for i, f := range files {
		pf, err := policy.ReadFiles(f)
		if err == nil {
			// The trace's t=0 is the simulated clock's reading 0.
			pols[i], err = (&policy.Compiler{Anchor: anchor}).CompileFiles(f, pf, nil, 0)
		}
		if err != nil {
			return err
		}
	}
	opts := simulate.RunOptions{MaxBuckets: *maxBuckets}
	if *plotPath != "" {
		opts.Hot = max(*hot, 0)
	}
	trace := simulate.FileTrace(*tracePath)
	if *tracePath == "-" {
		// Read whole: --plot replays the trace twice.
		data, err := io.ReadAll(stdin)
		if err != nil {
			return fmt.Errorf("simulate: standard input: %w", err)
		}
		trace = simulate.BytesTrace("stdin", data)
	}
	results, err := simulate.Run(context.Background(), trace, pols, opts)
	if err != nil {
		return err
	}
	if *plotPath != "" {
		if err := writePlot(*plotPath, results); err != nil {
			return err
		}
	}
	if *format == "json" {
		return simulate.WriteJSON(stdout, results)
	}
	if err := simulate.WriteText(stdout, trace.Name, results); err != nil {
		return err
	}
	if *plotPath != "" {
		_, err = fmt.Fprintf(stdout, "\nplot: %s\n", *plotPath)
	}
	return err
}

const simulateNotes = `trace: CSV, a header row and then a request a line (# starts a comment):
  t,domain,entries,hits
  0,edge,user=alice,                               hits empty: each rule's cost
  0.5,edge,user=alice|user=alice;path=/export,3    descriptors by |, entries by ;
  1.000000001,edge,user=alice,-2                   a refund of 2; t exact to the ns
  2,llm,request_id=r1|user=alice,|0                each descriptor's own hits, by |: a check
  3,llm,request_id=r1|user=alice,|5000             and its report, with the request id
or JSON lines: {"t":0.5,"domain":"edge","descriptors":[[{"key":"user","value":"alice"}]],"hits":3}
  ("hits":[null,5000]: each descriptor's own)

examples:
  tokengate simulate --policy policy.yaml --trace trace.csv
  tokengate simulate --policy live.yaml --compare raised.yaml --trace trace.csv --plot out.png
  tokengate simulate --policy policy.yaml --trace - --format json < trace.jsonl
`

func writePlot(path string, results []*simulate.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := simulate.WritePNG(f, results); err != nil {
		f.Close()
		return fmt.Errorf("simulate: %s: %w", path, err)
	}
	return f.Close()
}
