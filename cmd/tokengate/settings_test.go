package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSettingsBadEnvironment: a variable its flag cannot parse stops the
// start with an error naming the variable and the value, rather than
// being read as zero; every bad one is named at once.
func TestSettingsBadEnvironment(t *testing.T) {
	cases := []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{"TOKENGATE_MAX_BUCKETS": "abc"}, []string{`environment variable TOKENGATE_MAX_BUCKETS="abc": want a whole number (--max-buckets)`}},
		{map[string]string{"TOKENGATE_MAX_BUCKETS": "1.5"}, []string{`TOKENGATE_MAX_BUCKETS="1.5"`}},
		{map[string]string{"TOKENGATE_REDIS_DB": "one"}, []string{`TOKENGATE_REDIS_DB="one": want a whole number (--redis-db)`}},
		{map[string]string{"TOKENGATE_SHUTDOWN_TIMEOUT": "10"}, []string{`TOKENGATE_SHUTDOWN_TIMEOUT="10": want a duration with its unit`}},
		{map[string]string{"TOKENGATE_PPROF": "yes"}, []string{`TOKENGATE_PPROF="yes": want true or false (--pprof)`}},
		{map[string]string{"TOKENGATE_REDIS_LOCAL_SHARE": "half"}, []string{`TOKENGATE_REDIS_LOCAL_SHARE="half": want a number`}},
		{map[string]string{"TOKENGATE_MAX_BUCKETS": "abc", "TOKENGATE_JANITOR_INTERVAL": "often"}, []string{
			`TOKENGATE_JANITOR_INTERVAL="often"`, `TOKENGATE_MAX_BUCKETS="abc"`,
		}},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.want, ","), func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			_, err := loadSettings(nil)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestSettingsGoodEnvironment: what the flags accept, the variables do
// too; a flag beats a bad variable, and an empty one is unset.
func TestSettingsGoodEnvironment(t *testing.T) {
	t.Setenv("TOKENGATE_MAX_BUCKETS", "0x10")
	t.Setenv("TOKENGATE_PPROF", "1")
	t.Setenv("TOKENGATE_SHUTDOWN_TIMEOUT", "1m30s")
	t.Setenv("TOKENGATE_REDIS_LOCAL_SHARE", "0.5")
	t.Setenv("TOKENGATE_REDIS_DB", "abc")
	t.Setenv("TOKENGATE_JANITOR_INTERVAL", "")
	s, err := loadSettings([]string{"--redis-db", "2"})
	if err != nil {
		t.Fatal(err)
	}
	if s.MaxBuckets != 16 || !s.Pprof || s.ShutdownTimeout != 90*time.Second || s.Redis.LocalShare != 0.5 ||
		s.Redis.DB != 2 || s.JanitorInterval != 10*time.Second {
		t.Fatalf("got %+v", s)
	}
}

// TestSettingsBadFile: so does a settings file's value.
func TestSettingsBadFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "settings.yaml")
	if err := os.WriteFile(file, []byte("max-buckets: lots\npprof: yes\nreplay-window: 30s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := loadSettings([]string{"--config", file})
	for _, w := range []string{
		`settings file ` + file + `:1: max-buckets: "lots": want a whole number (--max-buckets)`,
		`settings file ` + file + `:2: pprof: "yes": want true or false (--pprof)`,
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v does not say %q", err, w)
		}
	}
}
