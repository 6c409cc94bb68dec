package main

import (
	"strings"
	"testing"
)

// TestXDSAndTLSSettingsCheck: settings that cannot do what they say stop
// the start, naming the flags.
func TestXDSAndTLSSettingsCheck(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" accepted
	}{
		{[]string{"--xds-server", "cp:18000", "--xds-node-id", "envoy-ratelimit", "--xds-node-metadata", `{"zone":"a"}`, "--xds-force-start"}, ""},
		{[]string{"--xds-server", "cp:18000", "--policy", "p.yaml"}, "leave --policy empty"},
		{[]string{"--xds-server", "cp:18000", "--xds-node-metadata", "zone=a"}, "--xds-node-metadata \"zone=a\": want a JSON object"},
		{[]string{"--xds-server", "cp:18000", "--xds-node-metadata", "[1]"}, "want a JSON object"},
		{[]string{"--xds-server", "cp:18000", "--xds-cert-file", "c.pem"}, "--xds-cert-file and --xds-key-file go together"},
		{[]string{"--xds-ca-file", "ca.pem"}, "--xds-ca-file \"ca.pem\" needs --xds-server"},
		{[]string{"--xds-force-start"}, ""},
		{[]string{"--grpc-tls-cert-file", "c.pem", "--grpc-tls-key-file", "k.pem", "--grpc-tls-client-ca-file", "ca.pem", "--grpc-tls-require-client-cert"}, ""},
		{[]string{"--grpc-tls-cert-file", "c.pem"}, "--grpc-tls-cert-file and --grpc-tls-key-file go together"},
		{[]string{"--grpc-tls-client-ca-file", "ca.pem"}, "needs --grpc-tls-cert-file"},
		{[]string{"--grpc-tls-cert-file", "c.pem", "--grpc-tls-key-file", "k.pem", "--grpc-tls-require-client-cert"}, "needs --grpc-tls-client-ca-file"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := loadSettings(tc.args)
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}
