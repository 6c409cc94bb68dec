// Package redistest starts real redis-server processes for tests: a single
// node or a three-master cluster, on free ports of 127.0.0.1, with no
// persistence, in a temporary directory, stopped when the test ends. A
// machine without redis-server fails the test with a message saying how to
// install it; the Redis store is never tested against a mock.
package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tokengate/tokengate/internal/poll"
)

// Server is one redis-server process.
type Server struct {
	t    testing.TB
	Port int
	dir  string
	pre  []string // arguments before --port (a config file)
	args []string
	env  []string // added to the process's environment
	mu   sync.Mutex
	cmd  *exec.Cmd
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr() }

// Binary returns the path of redis-server, failing the test when it is
// not installed.
func Binary(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found in PATH: the Redis store tests need a real server; install it with `apt-get install -y redis-server` (.ci/run does)")
	}
	return p
}

// Start starts a single redis-server on a free port with extra arguments
// (e.g. "--requirepass", "secret"); it is stopped when the test ends.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return startWith(t, nil, extra)
}

// startWith is Start with env added to the server's environment.
func startWith(t testing.TB, env, extra []string) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir(), env: env}
	s.args = append([]string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", s.dir}, extra...)
	s.run()
	return s
}

// StartSentinel starts a Sentinel on a free port that monitors master under
// the name name, with more lines of configuration (such as "sentinel
// down-after-milliseconds name 1000"); it is stopped when the test ends.
func StartSentinel(t testing.TB, name string, master *Server, conf ...string) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir()}
	file := filepath.Join(s.dir, "sentinel.conf")
	text := fmt.Sprintf("bind 127.0.0.1\nsentinel monitor %s 127.0.0.1 %d 1\n", name, master.Port)
	for _, l := range conf {
		text += l + "\n"
	}
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	s.pre = []string{file, "--sentinel"}
	s.run()
	return s
}

// run starts s on a free port, trying a few ports, and stops it when the
// test ends.
func (s *Server) run() {
	t := s.t
	t.Helper()
	bin := Binary(t)
	for try := 0; ; try++ {
		s.Port = freePort(t, false)
		err := s.start(bin)
		if err == nil {
			break
		}
		if try == 4 {
			t.Fatalf("redistest: %v", err)
		}
	}
	t.Cleanup(s.Stop)
}

func (s *Server) start(bin string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	args := append(append(append([]string(nil), s.pre...), "--port", strconv.Itoa(s.Port)), s.args...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = s.dir
	if s.env != nil {
		cmd.Env = append(os.Environ(), s.env...)
	}
	log, err := os.OpenFile(filepath.Join(s.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	s.cmd = cmd
	if poll.Until(10*time.Second, func() bool {
		reply, err := Do(s.Addr(), "PING")
		return err == nil && reply == "PONG" || err != nil && strings.HasPrefix(err.Error(), "NOAUTH")
	}) == nil {
		return nil
	}
	cmd.Process.Kill()
	cmd.Wait()
	s.cmd = nil
	out, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	return fmt.Errorf("redis-server on port %d did not answer PING within 10s:\n%s", s.Port, out)
}

// Stop stops the server (SIGTERM, then SIGKILL after 5s); it may be
// called more than once.
func (s *Server) Stop() { s.stop(syscall.SIGTERM) }

// Kill stops the server abruptly (SIGKILL), as a crash would.
func (s *Server) Kill() { s.stop(syscall.SIGKILL) }

func (s *Server) stop(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
	s.cmd = nil
}

// running reports whether the server was started and not stopped.
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Restart starts a stopped server again on the same port, empty.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.start(Binary(s.t)); err != nil {
		s.t.Fatalf("redistest: restart: %v", err)
	}
}

// Do sends one command over a fresh connection and returns the reply as
// text: a status or bulk string, an integer, or for an array its elements
// joined by newlines. An error reply is returned as an error.
func Do(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(c))
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("%s", line[1:])
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, _ := strconv.Atoi(line[1:])
		parts := make([]string, 0, max(n, 0))
		for range n {
			p, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}

// Info returns one field of INFO (e.g. "total_commands_processed").
func Info(t testing.TB, addr, section, field string) string {
	t.Helper()
	out, err := Do(addr, "INFO", section)
	if err != nil {
		t.Fatalf("INFO %s on %s: %v", section, addr, err)
	}
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
			return v
		}
	}
	return ""
}

var portMu sync.Mutex

// freePort returns a port of 127.0.0.1 nobody listens on; with bus, the
// port 10000 above it (a cluster node's bus) is free too.
func freePort(t testing.TB, bus bool) int {
	t.Helper()
	portMu.Lock()
	defer portMu.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("redistest: no free port: %v", err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !bus {
			return p
		}
		if p+10000 > 65535 {
			continue
		}
		if lb, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000)); err == nil {
			lb.Close()
			return p
		}
	}
	t.Fatal("redistest: no free port pair for a cluster node")
	return 0
}
