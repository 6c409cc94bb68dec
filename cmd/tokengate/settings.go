package main

// Settings: every knob of serve is one entry of settingsTable, which gives
// it a flag, an environment variable and a settings-file key. A flag beats
// the environment, which beats the file; whatever comes from the
// environment or the file is parsed by the flag's own parser, so that it
// means what the flag would. Nothing is read as zero or ignored: a value
// that does not parse names the variable or the file's line and the value,
// and an unknown TOKENGATE_* variable or file key is refused, so a typo
// (stroe: redis) cannot silently start tokengate with a default.
//
// No viper: it reads a value that does not parse as zero, matches keys
// case-insensitively, keeps no line numbers and cannot refuse an unknown
// key, so that every one of these checks had to be written around it.
// The file is read with go.yaml.in/yaml/v3 (YAML and JSON, with lines) or
// go-toml's parser (TOML, with lines).

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/tokengate/tokengate/internal/suggest"
	"github.com/tokengate/tokengate/pkg/policy"
	"github.com/tokengate/tokengate/pkg/server"
	"github.com/tokengate/tokengate/pkg/service"
)

// settings are serve's knobs, filled from settingsTable.
type settings struct {
	Config   string // the settings file
	Policy   string
	GRPCAddr string
	HTTPAddr string
	// GRPCMaxRecvBytes is server.Options.GRPCMaxRecvBytes.
	GRPCMaxRecvBytes int
	Store            string
	RedisAddr        string
	MaxBuckets       int
	LogLevel         string
	LogFormat        string
	Pprof            bool
	ShutdownTimeout  time.Duration
	JanitorInterval  time.Duration
	ReplayWindow     time.Duration
	// ReadyRequiresStore: not ready while the store fails (server.Options).
	ReadyRequiresStore bool
	// OnStoreError is the on_store_error of rules that name none
	// (policy.Compiler.OnStoreError).
	OnStoreError string
	// The HTTP status of a denial, per front door (frontdoor.Options).
	ExtAuthzDenyStatus    int
	ForwardAuthDenyStatus int
	DebugAddr             string          // /rlconfig and pprof; "" none
	MetricsAddr           string          // the metrics alone, at MetricsPath; "" none
	MetricsPath           string          //
	ShadowAll             bool            // service.Options.ShadowAll
	ReferenceCharge       string          // every_hit or before_request: policy.Compiler.ReferencePrepaid
	LimitHeaders          string          // service.Options.LimitHeaders, comma-separated
	ClientReasonHeader    bool            // service.Options.ClientReasonHeader
	Redis                 redisSettings   // the other --redis-* settings (redis.go)
	XDS                   xdsSettings     // --xds-* (xds.go)
	GRPCTLS               grpcTLSSettings // --grpc-tls-* (xds.go)
	RLQS                  rlqsSettings    // --rlqs-* (rlqs.go)
	// CandidatePolicy is decided beside Policy, never answering
	// (candidate.go).
	CandidatePolicy string
	// Why was a request limited (tracing.go): the decision log's lines a
	// second per level, and the OTLP endpoint that turns tracing on.
	DecisionLogRate int
	OTLPEndpoint    string
	// The secret bucket keys are hashed under where they are shown
	// (keyhash.go): a file, or the secret itself.
	KeyHashSecretFile string
	KeyHashSecret     string
}

// A setting is one row of settingsTable.
type setting struct {
	name string
	help string
	from source // where it may be given
	// bind registers the setting on fs as a flag whose value is its field
	// of s, set to its default.
	bind func(fs *pflag.FlagSet, s *settings)
}

// source is a set of places a setting may come from.
type source uint8

const (
	fromFlag source = 1 << iota
	fromEnv
	fromFile
)

// opt is a setting given everywhere, of the type of its field.
func opt[T string | int | bool | float64 | time.Duration](name string, def T, help string, field func(*settings) *T) setting {
	return setting{name: name, help: help, from: fromFlag | fromEnv | fromFile, bind: func(fs *pflag.FlagSet, s *settings) {
		switch p := any(field(s)).(type) {
		case *string:
			fs.StringVar(p, name, any(def).(string), help)
		case *int:
			fs.IntVar(p, name, any(def).(int), help)
		case *bool:
			fs.BoolVar(p, name, any(def).(bool), help)
		case *float64:
			fs.Float64Var(p, name, any(def).(float64), help)
		case *time.Duration:
			fs.DurationVar(p, name, any(def).(time.Duration), help)
		}
	}}
}

// only restricts where a setting may come from.
func (st setting) only(from source) setting { st.from = from; return st }

// envName is the environment variable of a setting: max-buckets is
// TOKENGATE_MAX_BUCKETS.
func envName(name string) string {
	return "TOKENGATE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// boundSettings are the settings of settingsTable bound to one settings
// value: the flags on flags, the settings that are not flags on rest, each
// a pflag.Flag whose Value parses into its field.
type boundSettings struct{ flags, rest *pflag.FlagSet }

// bindSettings binds every setting to s, each at its default, and sets
// the fields that are not settings (Redis.WatchEvery).
func bindSettings(s *settings) boundSettings {
	s.Redis.WatchEvery = redisWatchEvery
	b := boundSettings{pflag.NewFlagSet("serve", pflag.ContinueOnError), pflag.NewFlagSet("serve", pflag.ContinueOnError)}
	b.flags.SortFlags = false // in the table's order
	for _, st := range settingsTable {
		if st.from&fromFlag != 0 {
			st.bind(b.flags, s)
		} else {
			st.bind(b.rest, s)
		}
	}
	return b
}

// lookup finds a setting and its flag by name.
func (b boundSettings) lookup(name string) (setting, *pflag.Flag, bool) {
	for _, st := range settingsTable {
		if st.name == name {
			if f := b.flags.Lookup(name); f != nil {
				return st, f, true
			}
			return st, b.rest.Lookup(name), true
		}
	}
	return setting{}, nil, false
}

// loadSettings reads serve's settings from args, the TOKENGATE_*
// environment and the settings file, and checks them.
func loadSettings(args []string) (settings, error) {
	var s settings
	b := bindSettings(&s)
	if err := parseFlags(b.flags, args); err != nil {
		return settings{}, withNotes(err, settingsNotes())
	}
	if b.flags.NArg() > 0 {
		return settings{}, fmt.Errorf("serve takes no arguments, got %q", b.flags.Args())
	}
	given := map[string]bool{} // by a flag or the environment: the file does not override
	b.flags.Visit(func(f *pflag.Flag) { given[f.Name] = true })

	errs := fromEnvironment(os.Environ(), b, given)
	if s.Config != "" {
		errs = append(errs, fromSettingsFile(s.Config, b, given)...)
	}
	if err := errors.Join(errs...); err != nil {
		return settings{}, err
	}
	return s, s.check()
}

// fromEnvironment sets every TOKENGATE_* variable of env (KEY=value
// pairs) that is not empty and whose setting no flag gave, and marks it
// given. An unknown variable, or a value that does not parse, is an error
// naming the variable (and the value: a password never fails to parse).
func fromEnvironment(env []string, b boundSettings, given map[string]bool) []error {
	byEnv := map[string]string{}
	for _, st := range settingsTable {
		if st.from&fromEnv != 0 {
			byEnv[envName(st.name)] = st.name
		}
	}
	var errs []error
	for _, kv := range env {
		key, val, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(key, "TOKENGATE_") {
			continue
		}
		name, ok := byEnv[key]
		if !ok {
			errs = append(errs, fmt.Errorf("environment variable %s: no such setting%s (tokengate serve --help lists them)", key, suggest.Hint(key, settingNames(fromEnv, envName))))
			continue
		}
		if val == "" || given[name] {
			continue // empty is unset; a flag wins
		}
		_, f, _ := b.lookup(name)
		if err := f.Value.Set(val); err != nil {
			errs = append(errs, fmt.Errorf("environment variable %s=%q: want %s (--%s)", key, val, wants(f), name))
			continue
		}
		given[name] = true
	}
	return errs
}

// fromSettingsFile sets every key of the settings file path whose setting no flag
// or variable gave. An unknown key, one given twice, or a value that does
// not parse, is an error with the file, the key's line and the value; every
// such key is one error, so one start reports them all.
func fromSettingsFile(path string, b boundSettings, given map[string]bool) []error {
	entries, err := readSettingsFile(path)
	if err != nil {
		return []error{fmt.Errorf("settings file %w", err)}
	}
	var errs []error
	seen := map[string]int{}
	for _, e := range entries {
		at := fmt.Sprintf("settings file %s:%d: %s", path, e.line, e.key)
		st, f, ok := b.lookup(e.key)
		switch {
		case e.dotted:
			errs = append(errs, fmt.Errorf("%s: a dotted key: settings are top-level keys", at))
			continue
		case !ok:
			errs = append(errs, fmt.Errorf("%s: unknown key%s", at, suggest.Hint(e.key, settingNames(fromFile, func(n string) string { return n }))))
			continue
		case st.from&fromFile == 0:
			errs = append(errs, fmt.Errorf("%s: not a settings file key (a flag or %s)", at, envName(st.name)))
			continue
		case seen[e.key] != 0:
			errs = append(errs, fmt.Errorf("%s: given again (first on line %d)", at, seen[e.key]))
			continue
		}
		seen[e.key] = e.line
		if given[e.key] || e.null {
			continue
		}
		if e.err != "" {
			errs = append(errs, fmt.Errorf("%s: %s: want %s (--%s)", at, e.err, wants(f), e.key))
			continue
		}
		if err := f.Value.Set(e.value); err != nil {
			errs = append(errs, fmt.Errorf("%s: %q: want %s (--%s)", at, e.value, wants(f), e.key))
		}
	}
	return errs
}

// settingNames are the names of the settings that may come from, each
// shown by show (a settings-file key as it is, a variable by envName).
func settingNames(from source, show func(string) string) []string {
	var names []string
	for _, st := range settingsTable {
		if st.from&from != 0 {
			names = append(names, show(st.name))
		}
	}
	return names
}

// wants describes the values a flag takes.
func wants(f *pflag.Flag) string {
	switch f.Value.Type() {
	case "int":
		return "a whole number"
	case "float64":
		return "a number"
	case "bool":
		return "true or false"
	case "duration":
		return "a duration with its unit, such as 10s or 15ms"
	}
	return "a string"
}

// settingsNotes is what serve --help says after the flags.
func settingsNotes() string {
	var b strings.Builder
	b.WriteString(`Every flag --NAME is also the environment variable TOKENGATE_NAME (--max-buckets:
TOKENGATE_MAX_BUCKETS) and the key NAME of the --config file (max-buckets: 1000);
a flag beats the environment, which beats the file. An unknown TOKENGATE_*
variable or file key, or a value that does not parse, stops the start.
Not flags:
`)
	for _, st := range settingsTable {
		if st.from&fromFlag == 0 {
			fmt.Fprintf(&b, "  %s, key %s: %s\n", envName(st.name), st.name, st.help)
		}
	}
	return b.String()
}

// referencePrepaid reads --reference-charge (serve's, import's): whether
// the rules of envoyproxy/ratelimit's files are pre-paid
// (policy.Compiler.ReferencePrepaid).
func referencePrepaid(charge string) (bool, error) {
	switch charge {
	case policy.EveryHit.String():
		return false, nil
	case policy.BeforeRequest.String():
		return true, nil
	}
	return false, fmt.Errorf("--reference-charge %q: want every_hit or before_request", charge)
}

// storeErrorMode is --on-store-error.
func (s settings) storeErrorMode() (policy.StoreErrorMode, error) {
	m, err := policy.ParseStoreErrorMode(s.OnStoreError)
	if err != nil {
		return m, fmt.Errorf("--on-store-error %w", err)
	}
	return m, nil
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
	case s.MetricsAddr != "" && !strings.HasPrefix(s.MetricsPath, "/"):
		return fmt.Errorf("--metrics-path %q: want a path, starting with /", s.MetricsPath)
	case s.LimitHeaders != "" && len(s.limitHeaders()) != 3:
		return fmt.Errorf("--limit-headers %q: want three header names, LIMIT,REMAINING,RESET", s.LimitHeaders)
	case s.ShutdownTimeout <= 0 || s.JanitorInterval <= 0 || s.ReplayWindow <= 0:
		return fmt.Errorf("--shutdown-timeout, --janitor-interval and --replay-window must be positive")
	case s.GRPCMaxRecvBytes < 1<<10 || s.GRPCMaxRecvBytes > 64<<20:
		return fmt.Errorf("--grpc-max-recv-bytes %d: want 1024 to 67108864 (64 MiB)", s.GRPCMaxRecvBytes)
	case s.DecisionLogRate < 0:
		return fmt.Errorf("--decision-log-rate %d: want lines a second, or 0 to turn the decision log off", s.DecisionLogRate)
	}
	if _, err := s.storeErrorMode(); err != nil {
		return err
	}
	if err := checkOTLPEndpoint(s.OTLPEndpoint); err != nil {
		return err
	}
	if _, err := referencePrepaid(s.ReferenceCharge); err != nil {
		return err
	}
	if err := s.Redis.check(); s.Store == "redis" && err != nil {
		return err
	}
	if err := s.XDS.check(s.Policy); err != nil {
		return err
	}
	if err := s.RLQS.check(); err != nil {
		return err
	}
	if err := s.GRPCTLS.check(); err != nil {
		return err
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(s.LogLevel)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", s.LogLevel)
	}
	return nil
}

// limitHeaders are the names of --limit-headers, nil when it is off.
func (s settings) limitHeaders() []string {
	if s.LimitHeaders == "" {
		return nil
	}
	names := strings.Split(s.LimitHeaders, ",")
	for i, n := range names {
		if names[i] = strings.TrimSpace(n); names[i] == "" {
			return nil
		}
	}
	return names
}

// limitHeaderNames are --limit-headers for the service, nil when off.
func (s settings) limitHeaderNames() *service.LimitHeaders {
	n := s.limitHeaders()
	if n == nil {
		return nil
	}
	return &service.LimitHeaders{Limit: n[0], Remaining: n[1], Reset: n[2]}
}

// metricsListener is --metrics-addr for the server, nil when off.
func (s settings) metricsListener() *server.MetricsListener {
	if s.MetricsAddr == "" {
		return nil
	}
	return &server.MetricsListener{Addr: s.MetricsAddr, Path: s.MetricsPath}
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
