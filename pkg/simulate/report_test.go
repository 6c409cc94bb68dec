package simulate

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/pkg/policy"
)

// TestTextSideBySide: with two policies, one row per rule of either, "-"
// where a policy has no such rule.
func TestTextSideBySide(t *testing.T) {
	other := strings.Replace(testPolicy, "name: per-path", "name: per-route", 1)
	trace := header + lines(4, "0,edge,user=a|path=/x,") + "2.5,edge,probe=p,\n"
	res, err := Run(context.Background(), BytesTrace("t.csv", []byte(trace)),
		[]*policy.Policy{parsePolicy(t, "a.yaml", testPolicy), parsePolicy(t, "b.yaml", other)}, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteText(&buf, "t.csv", res); err != nil {
		t.Fatal(err)
	}
	want := `trace t.csv: 5 requests over 2.5s
policy 1 a.yaml: 1 over limit, 0 descriptors without a rule
policy 2 b.yaml: 1 over limit, 0 descriptors without a rule

                        policy 1                                                  policy 2
domain  rule            allowed   rejected  refused  blocked  refunds  first dry  allowed  rejected  refused  blocked  refunds  first dry
edge    per-user        3         0         0        1        0        -          3        0         0        1        0        -
edge    per-path        3         1         0        0        0        0s         -        -         -        -        -        -
edge    watch (shadow)  1         0         0        0        0        -          1        0         0        0        0        -
edge    per-route       -         -         -        -        -        -          3        1         0        0        0        0s
`
	if buf.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", buf.String(), want)
	}
}
