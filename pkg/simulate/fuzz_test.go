package simulate

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

// FuzzTrace: whatever a trace holds, reading and deciding it never panics;
// it ends at io.EOF or at an error that names the trace; requests come in
// time order with a line each, after the line before.
func FuzzTrace(f *testing.F) {
	f.Add(header + "0,edge,user=a,\n0.5,edge,user=a|path=/x,-2\n")
	f.Add("t,domain,entries\n1,edge,\"user=a;b=c\"\n")
	f.Add(`{"t":0,"domain":"edge","descriptors":[[{"key":"user","value":"a"}]],"hits":3}` + "\n" + `{"t":"1.5","domain":"edge","descriptors":[[]]}`)
	f.Add(header + "# c\n\n9223372036.854775807,edge,probe=p,99999999999\n")
	f.Add(header + "0,edge,user=a|path=/x,0|-2\n1,edge,user=a|path=/x,|\n")
	f.Add(`{"t":0,"domain":"edge","descriptors":[[{"key":"user","value":"a"}],[{"key":"path","value":"/x"}]],"hits":[5,null]}`)
	pol := parsePolicy(f, "p.yaml", testPolicy)
	f.Fuzz(func(t *testing.T, trace string) {
		s, err := New(pol, Options{})
		if err != nil {
			t.Fatal(err)
		}
		rd := NewReader("t.csv", strings.NewReader(trace))
		var req Request
		var last int64
		line := 0
		for {
			err := rd.Read(&req)
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				if !strings.HasPrefix(err.Error(), "t.csv:") {
					t.Fatalf("error without the trace's name: %v", err)
				}
				return
			}
			if req.At < last || req.Line <= line || len(req.Descriptors) == 0 {
				t.Fatalf("request at %d (after %d), line %d (after %d), %d descriptors", req.At, last, req.Line, line, len(req.Descriptors))
			}
			last, line = req.At, req.Line
			_ = s.Decide(context.Background(), &req)
		}
	})
}
