package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tokengate/tokengate/pkg/clock"
)

// TestSettingsKeepTheirNames: every flag tokengate had before the table
// keeps its name, type and default (the chart and deployments pass them).
func TestSettingsKeepTheirNames(t *testing.T) {
	was := map[string]string{ // name: type default, as pflag shows them
		"config": "string ", "policy": "string ", "grpc-addr": "string :8081", "http-addr": "string :8080",
		"store": "string memory", "redis-addr": "string 127.0.0.1:6379", "redis-url": "string ",
		"redis-ca-file": "string ", "redis-password-file": "string ", "redis-db": "int 0", "redis-pool-size": "int 0",
		"redis-timeout": "duration 15ms", "redis-dial-timeout": "duration 1s", "redis-sentinel-master": "string ",
		"redis-cluster": "bool false", "redis-key-prefix": "string tokengate:", "redis-local-share": "float64 1",
		"max-buckets": "int 1000000", "log-level": "string info", "log-format": "string json", "pprof": "bool false",
		"shutdown-timeout": "duration 10s", "janitor-interval": "duration 10s", "replay-window": "duration 30s",
		"ext-authz-deny-status": "int 429", "forward-auth-deny-status": "int 429",
	}
	var s settings
	b := bindSettings(&s)
	for name, want := range was {
		f := b.flags.Lookup(name)
		if f == nil {
			t.Errorf("--%s is gone", name)
			continue
		}
		if got := f.Value.Type() + " " + f.DefValue; got != want {
			t.Errorf("--%s: %s, was %s", name, got, want)
		}
	}
	if b.flags.Lookup("redis-password") != nil || b.rest.Lookup("redis-password") == nil {
		t.Error("redis-password must be a setting and never a flag")
	}
}

// TestSettingsNewRedisOptions: the admission, deny-cache, batching and
// clock-step settings default to the store's own defaults and reach its
// options as they are: 0, which turns admission, the deny cache and
// batching off, is the store's 0 (off) too.
func TestSettingsNewRedisOptions(t *testing.T) {
	s, err := loadSettings([]string{"--store", "redis"})
	if err != nil {
		t.Fatal(err)
	}
	o := s.Redis.storeOptions(s.ReplayWindow, clock.NewMonotonic(), nil, nil)
	if a := o.Admission; *a.Budget != 512 || a.HeavyShare != 0.5 || a.Light != 8 || a.Wait != 0 ||
		*o.DenyCacheBytes != 1<<20 || o.DenyCacheAge != time.Second || o.ClockStepTolerance != 6*time.Hour || *o.Batch.MaxInFlight != 2 {
		t.Fatalf("defaults: %+v budget %d, deny cache %d %v, tolerance %v, calls in flight %d",
			a, *a.Budget, *o.DenyCacheBytes, o.DenyCacheAge, o.ClockStepTolerance, *o.Batch.MaxInFlight)
	}
	s, err = loadSettings([]string{"--store", "redis", "--redis-admission-budget", "0", "--redis-deny-cache-bytes", "0", "--redis-batch-in-flight", "0",
		"--redis-admission-heavy-share", "0.25", "--redis-admission-light", "2", "--redis-admission-wait", "5ms",
		"--redis-deny-cache-age", "250ms", "--redis-clock-step-tolerance", "1h"})
	if err != nil {
		t.Fatal(err)
	}
	o = s.Redis.storeOptions(s.ReplayWindow, clock.NewMonotonic(), nil, nil)
	if a := o.Admission; *a.Budget != 0 || a.HeavyShare != 0.25 || a.Light != 2 || a.Wait != 5*time.Millisecond ||
		*o.DenyCacheBytes != 0 || o.DenyCacheAge != 250*time.Millisecond || o.ClockStepTolerance != time.Hour || *o.Batch.MaxInFlight != 0 {
		t.Fatalf("set: %+v budget %d, deny cache %d %v, tolerance %v, calls in flight %d",
			a, *a.Budget, *o.DenyCacheBytes, o.DenyCacheAge, o.ClockStepTolerance, *o.Batch.MaxInFlight)
	}
	for _, args := range [][]string{
		{"--redis-admission-budget", "-1"}, {"--redis-admission-heavy-share", "0"}, {"--redis-admission-heavy-share", "1.5"},
		{"--redis-admission-light", "0"}, {"--redis-admission-wait", "15ms"}, {"--redis-admission-wait", "-1ms"},
		{"--redis-deny-cache-bytes", "-1"}, {"--redis-deny-cache-age", "0s"}, {"--redis-clock-step-tolerance", "0s"},
	} {
		if _, err := loadSettings(append([]string{"--store", "redis"}, args...)); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}

// TestSettingsUnknownEnvironment: a TOKENGATE_* variable that is no
// setting stops the start, naming it (and the nearest setting).
func TestSettingsUnknownEnvironment(t *testing.T) {
	t.Setenv("TOKENGATE_STROE", "redis")
	t.Setenv("TOKENGATE_NO_SUCH_THING", "1")
	_, err := loadSettings(nil)
	for _, w := range []string{
		"environment variable TOKENGATE_STROE: no such setting (did you mean TOKENGATE_STORE?)",
		"environment variable TOKENGATE_NO_SUCH_THING: no such setting (tokengate serve --help lists them)",
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v does not say %q", err, w)
		}
	}
}

// TestSettingsFileKeys: a settings file, YAML, JSON or TOML, refuses an
// unknown key, a key given twice, a value that is not one value, and the
// key config, each with its line, and every bad key of a file at once;
// the password is a key, not a flag.
func TestSettingsFileKeys(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		want          []string // ":LINE: ..." after the file's path
	}{
		{"settings.yaml", "grpc-addr: :9000\nstroe: redis\n", []string{`:2: stroe: unknown key (did you mean store?)`}},
		{"settings.yaml", "store: redis\nstore: memory\n", []string{`:2: store: given again (first on line 1)`}},
		{"settings.yaml", "config: other.yaml\n", []string{`:1: config: not a settings file key (a flag or TOKENGATE_CONFIG)`}},
		{"settings.yaml", "policy: [a, b]\n", []string{`:1: policy: not a single value: want a string (--policy)`}},
		{"settings.yaml", "- store\n", []string{`:1: want key: value settings`}},
		{"settings.json", "{\n  \"store\": \"memory\",\n  \"max-bucket\": 5\n}\n", []string{`:3: max-bucket: unknown key (did you mean max-buckets?)`}},
		{"settings.toml", "store = \"memory\"\nmax-buckets = \"lots\"\n", []string{`:2: max-buckets: "lots": want a whole number (--max-buckets)`}},
		{"settings.toml", "store = \"memory\"\n\n[redis]\naddr = \"x\"\n", []string{`:3: a [table]: settings are top-level key = value lines`}},
		{"settings.toml", "redis.addr = \"x\"\n", []string{`:1: redis.addr: a dotted key`}},
		{"settings.yaml", "polciy: p.yaml\nstore: memory\nmax-bukets: 5\n", []string{
			`:1: polciy: unknown key (did you mean policy?)`, `:3: max-bukets: unknown key (did you mean max-buckets?)`}},
		{"settings.toml", "redis.addr = \"x\"\nstroe = \"redis\"\nlog-levle = \"debug\"\n", []string{
			`:1: redis.addr: a dotted key`, `:2: stroe: unknown key (did you mean store?)`, `:3: log-levle: unknown key (did you mean log-level?)`}},
		{"settings.toml", "store = memory\n", []string{`:1: `}},
		{"settings.ini", "store=redis\n", []string{`: want a .yaml, .yml, .json or .toml file, not ".ini"`}},
	} {
		t.Run(tc.name+" "+tc.want[0], func(t *testing.T) {
			file := filepath.Join(t.TempDir(), tc.name)
			if err := os.WriteFile(file, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := loadSettings([]string{"--config", file})
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), "settings file "+file+w) {
					t.Errorf("error %v does not say %q", err, "settings file "+file+w)
				}
			}
		})
	}
}

// TestSettingsFileFormats: the same settings read from YAML, JSON and TOML,
// the password among them; the environment beats the file.
func TestSettingsFileFormats(t *testing.T) {
	for name, content := range map[string]string{
		"s.yaml": "store: redis\nmax-buckets: 0x10\npprof: true\nredis-password: p\nredis-local-share: 0.5\nreplay-window: 1m\nlog-level:\n",
		"s.json": `{"store": "redis", "max-buckets": 16, "pprof": true, "redis-password": "p", "redis-local-share": 0.5, "replay-window": "1m"}`,
		"s.toml": "store = 'redis'\nmax-buckets = 0x10\npprof = true\nredis-password = \"p\"\nredis-local-share = 0.5\nreplay-window = \"1m\"\n",
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), name)
			if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Setenv("TOKENGATE_REPLAY_WINDOW", "2m")
			s, err := loadSettings([]string{"--config", file})
			if err != nil {
				t.Fatal(err)
			}
			if s.Store != "redis" || s.MaxBuckets != 16 || !s.Pprof || s.Redis.Password != "p" || s.Redis.LocalShare != 0.5 ||
				s.ReplayWindow != 2*time.Minute || s.LogLevel != "info" {
				t.Fatalf("got %+v", s)
			}
		})
	}
}

// TestSettingsConfigFromEnvironment: TOKENGATE_CONFIG names the file.
func TestSettingsConfigFromEnvironment(t *testing.T) {
	file := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(file, []byte("stroe: redis\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TOKENGATE_CONFIG", file)
	if _, err := loadSettings(nil); err == nil || !strings.Contains(err.Error(), file+":1: stroe: unknown key") {
		t.Fatalf("error %v", err)
	}
}

// TestSettingsLandInTheirOwnField: setting any one row changes exactly one
// field of settings, and no two rows change the same one.
func TestSettingsLandInTheirOwnField(t *testing.T) {
	var base settings
	bindSettings(&base)
	owner := map[string]string{} // field path: setting
	for _, st := range settingsTable {
		var s settings
		_, f, _ := bindSettings(&s).lookup(st.name)
		value := map[string]string{"string": "x", "int": "7", "bool": "true", "float64": "0.25", "duration": "3s"}[f.Value.Type()]
		if err := f.Value.Set(value); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		changed := diffFields(reflect.ValueOf(base), reflect.ValueOf(s), "")
		if len(changed) != 1 {
			t.Errorf("%s=%s changed fields %v, want one", st.name, value, changed)
			continue
		}
		if other, ok := owner[changed[0]]; ok {
			t.Errorf("%s and %s both land in %s", other, st.name, changed[0])
		}
		owner[changed[0]] = st.name
	}
}

// diffFields lists the paths of the fields of structs a and b that differ.
func diffFields(a, b reflect.Value, prefix string) []string {
	var out []string
	for i := range a.NumField() {
		name := prefix + a.Type().Field(i).Name
		if a.Field(i).Kind() == reflect.Struct {
			out = append(out, diffFields(a.Field(i), b.Field(i), name+".")...)
		} else if !a.Field(i).Equal(b.Field(i)) {
			out = append(out, name)
		}
	}
	return out
}
