package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"
)

// config is one run's settings; main fills it from the flags.
type config struct {
	Name     string        // printed after RESULT
	Addr     string        // host:port, 127.0.0.1 or ::1 only
	Workers  int           // -c: concurrent calls, one each at a time
	Conns    int           // -conns: HTTP/2 connections the workers share
	Warmup   time.Duration // sent but not measured
	Duration time.Duration // measured
	// Grace is how long the run waits, after warmup+duration, for workers
	// to return before it gives up with an error: the hard bound of a run.
	Grace time.Duration
	// Rate, when positive, is the total requests/s of an open-loop run:
	// each worker sends on its own fixed schedule of Rate/Workers a second
	// instead of as soon as its last answer came. Zero is a closed loop.
	Rate float64

	Domain     string
	Key        string // descriptor entry key
	Descs      int    // descriptors per request
	Keys       int    // distinct key values
	Hot        bool   // every request asks for the one value hotValue
	Sequential bool   // each worker walks the key values in order instead of at random
	Hits       uint32 // hits_addend; 0 leaves it unset (the server counts 1)
	Pids       []proc // processes whose CPU time over the window is reported
}

// hotValue is the descriptor value of -hot.
const hotValue = "hot"

// validate reports the first setting a run cannot use.
func (c config) validate() error {
	if err := checkLoopback(c.Addr); err != nil {
		return err
	}
	switch {
	case c.Workers < 1:
		return fmt.Errorf("-c %d: need at least one worker", c.Workers)
	case c.Conns < 1 || c.Conns > c.Workers:
		return fmt.Errorf("-conns %d: need between 1 and -c (%d) connections", c.Conns, c.Workers)
	case c.Duration <= 0:
		return fmt.Errorf("-d %v: the measured window must be positive", c.Duration)
	case c.Warmup < 0:
		return fmt.Errorf("-warmup %v: must not be negative", c.Warmup)
	case c.Grace <= 0:
		return fmt.Errorf("-grace %v: must be positive", c.Grace)
	case c.Rate < 0:
		return fmt.Errorf("-rate %v: must not be negative", c.Rate)
	case c.Domain == "" || c.Key == "":
		return errors.New("-domain and -key must not be empty")
	case c.Descs < 1:
		return fmt.Errorf("-descs %d: need at least one descriptor", c.Descs)
	case !c.Hot && c.Keys < 1:
		return fmt.Errorf("-keys %d: need at least one key value", c.Keys)
	}
	return nil
}

// checkLoopback accepts host:port with host exactly 127.0.0.1 or ::1. Names
// (localhost included) are refused: what they resolve to is not ours to
// check, and a load client must not be pointed at another machine.
func checkLoopback(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-addr %q: %w", addr, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || (ip != netip.MustParseAddr("127.0.0.1") && ip != netip.IPv6Loopback()) {
		return fmt.Errorf("-addr %q: only 127.0.0.1 and [::1] are allowed", addr)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("-addr %q: bad port", addr)
	}
	return nil
}
