// Command loadclient is test/load's gRPC load generator for
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit. ghz, which
// test/load used before, saturates its own core at 5-7k calls/s on the
// project's machine and so could not tell two servers apart; this client
// does little per call besides gRPC itself.
//
// -c workers share -conns HTTP/2 connections (insecure, to 127.0.0.1 or
// [::1] only: any other address is refused). Each worker sends one call at
// a time, closed loop, or with -rate on its own fixed schedule of
// rate/c calls a second (open loop); requests are built before the run,
// one per key value. After a probe call on each connection, it sends for
// -warmup (not measured) and then -d (measured), and stops by itself; if a
// call is still running -grace after that, it exits with an error.
//
// It prints one line:
//
//	RESULT name rps= reqs= ok= over_limit= errors= [errors.CODE=]… cut=
//	    p50= p90= p99= p99.9= max= client_cpu= client_cpu_us_per_req=
//	    [NAME_cpu= NAME_cpu_us_per_req=]… c= conns= descs= keys= rate= window=
//
// Latencies are in milliseconds, from a histogram within 0.8 %; *_cpu is
// in cores (CPU seconds per second of the window) and *_cpu_us_per_req in
// CPU microseconds per counted call, for this process and for each
// name=pid of -pids (from /proc/PID/stat, 10 ms resolution). A call counts
// if it completes inside the measured window: reqs = ok + over_limit +
// errors, errors broken down by gRPC code (BadOverallCode: an answer
// neither OK nor OVER_LIMIT). Calls completing after the window, those the
// end of the run cancelled among them, are cut, not errors.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	c, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadclient:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := run(ctx, c)
	if err == nil {
		err = report(os.Stdout, r)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadclient:", err)
		os.Exit(1)
	}
}

// parseFlags turns the command line into a checked config.
func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("loadclient", flag.ContinueOnError)
	var c config
	var order, pids string
	var hits uint
	fs.StringVar(&c.Name, "name", "", "name printed after RESULT")
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8081", "server address: 127.0.0.1:PORT or [::1]:PORT")
	fs.IntVar(&c.Workers, "c", 64, "workers (concurrent calls)")
	fs.IntVar(&c.Conns, "conns", 4, "HTTP/2 connections the workers share (worker i uses i mod conns)")
	fs.DurationVar(&c.Warmup, "warmup", time.Second, "sending time before the measured window")
	fs.DurationVar(&c.Duration, "d", 5*time.Second, "measured window")
	fs.DurationVar(&c.Grace, "grace", 5*time.Second, "how long calls may outlast the run before it fails; also the probe's timeout")
	fs.Float64Var(&c.Rate, "rate", 0, "total calls/s, paced open loop per worker (rate/c each); 0 is a closed loop")
	fs.StringVar(&c.Domain, "domain", "load", "request domain")
	fs.StringVar(&c.Key, "key", "user_id", "descriptor entry key")
	fs.IntVar(&c.Descs, "descs", 1, "descriptors per request, with the values of consecutive keys")
	fs.IntVar(&c.Keys, "keys", 100000, "distinct key values u0…u<keys-1>")
	fs.BoolVar(&c.Hot, "hot", false, `one key value, "hot", for every descriptor (overrides -keys)`)
	fs.StringVar(&order, "order", "random", "how a worker picks the next key: random (uniform) or seq (in order, from a start per worker)")
	fs.UintVar(&hits, "hits", 0, "hits_addend of every request; 0 leaves it unset (the server counts 1)")
	fs.StringVar(&pids, "pids", "", "processes whose CPU time to report: name=pid,name=pid")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch order {
	case "random":
	case "seq":
		c.Sequential = true
	default:
		return config{}, fmt.Errorf("-order %q: want random or seq", order)
	}
	if hits > 1<<32-1 {
		return config{}, fmt.Errorf("-hits %d: hits_addend is a uint32", hits)
	}
	c.Hits = uint32(hits)
	var err error
	if c.Pids, err = parsePids(pids); err != nil {
		return config{}, err
	}
	return c, c.validate()
}
