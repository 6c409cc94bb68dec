package spec_test

import (
	"strings"
	"testing"

	"github.com/tokengate/tokengate/pkg/frontdoor/spec"
)

func TestClientAddress(t *testing.T) {
	for _, c := range []struct {
		hops int
		peer string
		xff  []string
		want string
	}{
		{0, "10.0.0.9:5555", []string{"1.1.1.1"}, "10.0.0.9"},
		{1, "10.0.0.9:5555", nil, "10.0.0.9"},
		{1, "10.0.0.9", []string{"6.6.6.6, 1.1.1.1"}, "1.1.1.1"},
		{1, "10.0.0.9", []string{"6.6.6.6", "1.1.1.1"}, "1.1.1.1"},
		{2, "10.0.0.9", []string{"6.6.6.6, 1.1.1.1, 10.0.0.8"}, "1.1.1.1"},
		{3, "10.0.0.9", []string{"1.1.1.1, 10.0.0.8"}, "10.0.0.9"},           // too short: the peer
		{1, "10.0.0.9", []string{"1.1.1.1, 10.0.0.9"}, "1.1.1.1"},            // Envoy appended its peer
		{1, "[::ffff:10.0.0.9]:80", []string{" 1.1.1.1:443 , ,"}, "1.1.1.1"}, // ports, blanks
		{1, "::1", []string{"2001:DB8::1"}, "2001:db8::1"},                   // canonical
		{1, "::1", []string{"unknown"}, "unknown"},                           // kept as is
		{1, "10.0.0.9", []string{"::ffff:1.2.3.4"}, "1.2.3.4"},               // unmapped
		{2, "10.0.0.9", []string{"1.1.1.1, 10.0.0.9, 10.0.0.9"}, "1.1.1.1"},  // only the rightmost is dropped
		{1, "10.0.0.9", []string{strings.Repeat("9.9.9.9,", 100) + "1.1.1.1"}, "1.1.1.1"},
	} {
		fd := &spec.Door{TrustedProxyHops: c.hops}
		if got := fd.ClientAddress(c.peer, c.xff); got != c.want {
			t.Errorf("hops %d peer %q xff %q: %q, want %q", c.hops, c.peer, c.xff, got, c.want)
		}
	}
}
