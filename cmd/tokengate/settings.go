package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// settings are serve's knobs. Each flag --some-name is also the environment
// variable TOKENGATE_SOME_NAME and the key some-name of an optional
// settings file (--config); a flag beats the environment, which beats the
// file. The flag names are part of tokengate's contract.
type settings struct {
	Policy          string
	GRPCAddr        string
	HTTPAddr        string
	Store           string
	RedisAddr       string
	MaxBuckets      int
	LogLevel        string
	LogFormat       string
	Pprof           bool
	ShutdownTimeout time.Duration
	JanitorInterval time.Duration
	ReplayWindow    time.Duration
	// ReadyRequiresStore: not ready while the store fails (server.Options).
	ReadyRequiresStore bool
	// The HTTP status of a denial, per front door (frontdoor.Options).
	ExtAuthzDenyStatus    int
	ForwardAuthDenyStatus int
	Redis                 redisSettings // the other --redis-* flags (redis.go)
}

func loadSettings(args []string) (settings, error) {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.String("config", "", "settings file (YAML, JSON or TOML) with the keys below")
	fs.String("policy", "", "policy file to serve and watch (default: the built-in policy)")
	fs.String("grpc-addr", ":8081", "gRPC listen address (ratelimit.v3, health, reflection)")
	fs.String("http-addr", ":8080", "HTTP listen address (/metrics, /healthz, /readyz, /debug/policy)")
	fs.String("store", "memory", "where buckets live: memory or redis")
	fs.String("redis-addr", "127.0.0.1:6379", "Redis address, for --store redis")
	addRedisFlags(fs)
	fs.Int("max-buckets", 1_000_000, "most buckets the memory store holds")
	fs.String("log-level", "info", "debug, info, warn or error")
	fs.String("log-format", "json", "json or text")
	fs.Bool("ready-requires-store", false, "not ready (gRPC health, /readyz) while the store fails; by default tokengate stays ready while on_store_error answers, and reports the store on gRPC health service tokengate.store")
	fs.Bool("pprof", false, "serve /debug/pprof/ on the HTTP address")
	fs.Duration("shutdown-timeout", 10*time.Second, "longest wait for in-flight RPCs on SIGTERM")
	fs.Duration("janitor-interval", 10*time.Second, "how often full and removed buckets are dropped")
	fs.Duration("replay-window", 30*time.Second, "how long a request id is remembered")
	fs.Int("ext-authz-deny-status", 429, "HTTP status Envoy's ext_authz answers a rate-limited request with")
	fs.Int("forward-auth-deny-status", 429, "HTTP status /v1/check denies with (ingress-nginx auth-url needs 401 or 403)")
	if err := parseFlags(fs, args); err != nil {
		return settings{}, err
	}
	if fs.NArg() > 0 {
		return settings{}, fmt.Errorf("serve takes no arguments, got %q", fs.Args())
	}
	v := viper.New()
	v.SetEnvPrefix("TOKENGATE")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	if err := v.BindPFlags(fs); err != nil {
		return settings{}, err
	}
	if file := v.GetString("config"); file != "" {
		v.SetConfigFile(file)
		if err := v.ReadInConfig(); err != nil {
			return settings{}, fmt.Errorf("settings file: %w", err)
		}
	}
	if err := checkSources(fs, v); err != nil {
		return settings{}, err
	}
	s := settings{
		Policy:             v.GetString("policy"),
		GRPCAddr:           v.GetString("grpc-addr"),
		HTTPAddr:           v.GetString("http-addr"),
		Store:              v.GetString("store"),
		RedisAddr:          v.GetString("redis-addr"),
		MaxBuckets:         v.GetInt("max-buckets"),
		LogLevel:           v.GetString("log-level"),
		LogFormat:          v.GetString("log-format"),
		Pprof:              v.GetBool("pprof"),
		ReadyRequiresStore: v.GetBool("ready-requires-store"),
		ShutdownTimeout:    v.GetDuration("shutdown-timeout"),
		JanitorInterval:    v.GetDuration("janitor-interval"),
		ReplayWindow:       v.GetDuration("replay-window"),
	}
	s.ExtAuthzDenyStatus, s.ForwardAuthDenyStatus = v.GetInt("ext-authz-deny-status"), v.GetInt("forward-auth-deny-status")
	s.Redis = readRedisSettings(v)
	return s, s.check()
}

// checkSources refuses a setting from the environment or the settings
// file that its flag could not parse. viper reads such a value as zero
// (TOKENGATE_MAX_BUCKETS=abc would be 0, TOKENGATE_REDIS_DB=abc database
// 0, TOKENGATE_SHUTDOWN_TIMEOUT=10 ten nanoseconds), so the error would
// name the wrong value, or there would be none. Every bad one is reported,
// each with the variable or file key and the value. A setting given as a
// flag is not checked here: the flag wins and pflag parsed it.
func checkSources(fs *pflag.FlagSet, v *viper.Viper) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			return
		}
		want := flagWants(f.Value.Type())
		if want == "" {
			return // a string: anything goes
		}
		env := envName(f.Name)
		if val := os.Getenv(env); val != "" { // viper ignores an empty variable
			if !parses(f.Value.Type(), val) {
				errs = append(errs, fmt.Errorf("environment variable %s=%q: want %s (--%s)", env, val, want, f.Name))
			}
			return
		}
		if v.InConfig(f.Name) {
			if val := fmt.Sprint(v.Get(f.Name)); !parses(f.Value.Type(), val) {
				errs = append(errs, fmt.Errorf("settings file %s: %s: %q: want %s (--%s)", v.ConfigFileUsed(), f.Name, val, want, f.Name))
			}
		}
	})
	return errors.Join(errs...)
}

// envName is the environment variable of a flag: --max-buckets is
// TOKENGATE_MAX_BUCKETS.
func envName(flag string) string {
	return "TOKENGATE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// flagWants describes the values a flag of pflag type typ takes; "" for a
// string flag.
func flagWants(typ string) string {
	switch typ {
	case "int":
		return "a whole number"
	case "float64":
		return "a number"
	case "bool":
		return "true or false"
	case "duration":
		return "a duration with its unit, such as 10s or 15ms"
	}
	return ""
}

// parses reports whether pflag would accept s for a flag of type typ.
func parses(typ, s string) bool {
	var err error
	switch typ {
	case "int":
		_, err = strconv.ParseInt(s, 0, strconv.IntSize)
	case "float64":
		_, err = strconv.ParseFloat(s, 64)
	case "bool":
		_, err = strconv.ParseBool(s)
	case "duration":
		_, err = time.ParseDuration(s)
	}
	return err == nil
}

func (s settings) check() error {
	switch {
	case s.Store != "memory" && s.Store != "redis":
		return fmt.Errorf("--store %q: want memory or redis", s.Store)
	case s.MaxBuckets <= 0:
		return fmt.Errorf("--max-buckets %d: want a positive number", s.MaxBuckets)
	case s.LogFormat != "json" && s.LogFormat != "text":
		return fmt.Errorf("--log-format %q: want json or text", s.LogFormat)
	case s.ExtAuthzDenyStatus < 400 || s.ExtAuthzDenyStatus > 599:
		return fmt.Errorf("--ext-authz-deny-status %d: want an HTTP error status, 400 to 599", s.ExtAuthzDenyStatus)
	case s.ForwardAuthDenyStatus < 400 || s.ForwardAuthDenyStatus > 599:
		return fmt.Errorf("--forward-auth-deny-status %d: want an HTTP error status, 400 to 599", s.ForwardAuthDenyStatus)
	case s.ShutdownTimeout <= 0 || s.JanitorInterval <= 0 || s.ReplayWindow <= 0:
		return fmt.Errorf("--shutdown-timeout, --janitor-interval and --replay-window must be positive")
	}
	if err := s.Redis.check(); s.Store == "redis" && err != nil {
		return err
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(s.LogLevel)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", s.LogLevel)
	}
	return nil
}

// logger is the logger of --log-level and --log-format, writing to w.
func (s settings) logger(w io.Writer) *slog.Logger {
	var l slog.Level
	l.UnmarshalText([]byte(s.LogLevel))
	opts := &slog.HandlerOptions{Level: l, ReplaceAttr: durationsAsText}
	if s.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// durationsAsText writes a duration as Go writes it ("10s", "1.5ms"), in
// JSON too, where slog would write nanoseconds (10000000000).
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}
