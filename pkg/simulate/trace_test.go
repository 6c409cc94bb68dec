package simulate

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/pkg/policy"
)

func TestParseSeconds(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"0", 0}, {"1", 1e9}, {"1.0", 1e9}, {"0.999999999", 999_999_999}, {"0.000000001", 1},
		{".5", 500_000_000}, {"2.", 2e9}, {"12.25", 12_250_000_000}, {"1.5000000000", 1_500_000_000},
		{"9223372036.854775807", 1<<63 - 1},
	} {
		if got, err := ParseSeconds(c.in); err != nil || got != c.want {
			t.Errorf("ParseSeconds(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
		if c.in == "0" || c.in == "0.999999999" || c.in == "12.25" {
			if s := FormatSeconds(c.want); s != c.in {
				t.Errorf("FormatSeconds(%d) = %q, want %q", c.want, s, c.in)
			}
		}
	}
	for _, in := range []string{"", ".", "-1", "+1", "1e3", "1.5s", "0x10", "1.0000000001", "9223372037", "9223372036.854775808", "1,5", " 1"} {
		if got, err := ParseSeconds(in); err == nil {
			t.Errorf("ParseSeconds(%q) = %d, want an error", in, got)
		}
	}
}

// TestTraceErrors: a bad line stops the run with its line and what is wrong.
func TestTraceErrors(t *testing.T) {
	for _, c := range []struct{ name, trace, want string }{
		{"empty", "", "t.csv: empty trace"},
		{"header", "time,domain,entries\n", `t.csv:1: header "time,domain,entries": want t,domain,entries,hits`},
		{"fields", header + "0,edge,user=a,\n0,edge\n", "t.csv:3: 2 fields: want 4"},
		{"t", header + "\n0,edge,user=a,\nsoon,edge,user=a,\n", `t.csv:4: t "soon": want seconds`},
		{"order", header + "2,edge,user=a,\n1.5,edge,user=a,\n", "t.csv:3: t 1.5 is before the line above's 2"},
		{"entry", header + "0,edge,user=a;bare,\n", `t.csv:2: entries: descriptor 0: entry "bare": want key=value`},
		{"empty key", header + "0,edge,user=a|=v,\n", `t.csv:2: entries: descriptor 1: entry "=v": want key=value`},
		{"no descriptors", header + "0,edge,,\n", "t.csv:2: entries: no descriptors"},
		{"hits", header + "0,edge,user=a,lots\n", `t.csv:2: hits "lots": want a whole number`},
		{"quote", header + "0,edge,\"user=a,\n", "t.csv:2: extraneous or missing \" in quoted-field"},
		{"domain", header + "# a comment\n0,,user=a,\n", "t.csv:3: domain is empty"},
		{"too many", header + "0,edge," + strings.Repeat("user=a|", 64) + "user=a,\n", "t.csv:2: 65 descriptors: at most 64"},
		{"json", `{"t":0,"domain":"edge","descriptors":[[{"key":"user","value":"a"}]]}` + "\n{\"t\":1,\n", "t.csv:2: unexpected end of JSON input"},
		{"json t", `{"domain":"edge","descriptors":[[{"key":"user","value":"a"}]]}`, `t.csv:1: "t" is missing`},
		{"json t exp", `{"t":1e3,"domain":"edge","descriptors":[[{"key":"user","value":"a"}]]}`, `t.csv:1: t "1e3": want seconds`},
		{"json none", "\n" + `{"t":1,"domain":"edge","descriptors":[]}`, `t.csv:2: "descriptors": none`},
		{"json hits", `{"t":1,"domain":"edge","descriptors":[[{"key":"user","value":"a"}]],"hits":1.5}`, `t.csv:1: hits "1.5"`},
		{"json entries", `{"t":1,"domain":"edge","descriptors":[[]]}`, "t.csv:1: descriptor 0 has 0 entries"},
		{"hits each", header + "0,edge,user=a|path=/p,1|2|3\n", `t.csv:2: hits "1|2|3": 3 values for 2 descriptors`},
		{"hits each bad", header + "0,edge,user=a|path=/p,1|x\n", `t.csv:2: hits "x": want a whole number`},
		{"json hits each", `{"t":1,"domain":"edge","descriptors":[[{"key":"user","value":"a"}]],"hits":[1,2]}`, `t.csv:1: "hits": 2 values for 1 descriptors`},
		{"json hits list", `{"t":1,"domain":"edge","descriptors":[[{"key":"user","value":"a"}]],"hits":[true]}`, `t.csv:1: "hits": [true]: want a whole number`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Run(context.Background(), BytesTrace("t.csv", []byte(c.trace)), []*policy.Policy{parsePolicy(t, "p.yaml", testPolicy)}, RunOptions{})
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

// TestReaderReusesDescriptors: a Reader recycles a request's descriptors
// for the next, and a descriptor without hits has none from the one before.
func TestReaderReusesDescriptors(t *testing.T) {
	rd := NewReader("t.csv", strings.NewReader(header+"0,edge,user=a|path=/p,-3\n0.5,edge,user=b,\n"))
	var req Request
	if err := rd.Read(&req); err != nil {
		t.Fatal(err)
	}
	if d := req.Descriptors; len(d) != 2 || d[1].Entries[0].Value != "/p" || d[0].HitsAddend.GetValue() != 3 || !d[0].IsNegativeHits {
		t.Fatalf("first: %v", d)
	}
	if err := rd.Read(&req); err != nil {
		t.Fatal(err)
	}
	if d := req.Descriptors; req.Line != 3 || req.At != 5e8 || len(d) != 1 || d[0].Entries[0].Value != "b" || d[0].HitsAddend != nil || d[0].IsNegativeHits {
		t.Fatalf("second: line %d at %d %v", req.Line, req.At, d)
	}
	if err := rd.Read(&req); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last: %v", err)
	}
}

// TestHitsPerDescriptor: hits separated by "|" (CSV) or a list (JSON
// lines) are each descriptor's own hits_addend, an empty one (null)
// none; one value is every descriptor's.
func TestHitsPerDescriptor(t *testing.T) {
	for _, trace := range []string{
		header + "0,edge,user=a|path=/p|user=b,0||-7\n",
		`{"t":0,"domain":"edge","descriptors":[[{"key":"user","value":"a"}],[{"key":"path","value":"/p"}],[{"key":"user","value":"b"}]],"hits":[0,null,-7]}`,
		`{"t":0,"domain":"edge","descriptors":[[{"key":"user","value":"a"}],[{"key":"path","value":"/p"}],[{"key":"user","value":"b"}]],"hits":["0",null,"-7"]}`,
	} {
		rd := NewReader("t", strings.NewReader(trace))
		var req Request
		if err := rd.Read(&req); err != nil {
			t.Fatal(err)
		}
		d := req.Descriptors
		if len(d) != 3 || d[0].HitsAddend == nil || d[0].HitsAddend.Value != 0 || d[0].IsNegativeHits ||
			d[1].HitsAddend != nil || d[1].IsNegativeHits || d[2].HitsAddend.GetValue() != 7 || !d[2].IsNegativeHits {
			t.Errorf("%s: %v", trace, d)
		}
	}
	rd := NewReader("t", strings.NewReader(`{"t":0,"domain":"edge","descriptors":[[{"key":"user","value":"a"}],[{"key":"user","value":"b"}]],"hits":4}`))
	var req Request
	if err := rd.Read(&req); err != nil {
		t.Fatal(err)
	}
	if d := req.Descriptors; d[0].HitsAddend.GetValue() != 4 || d[1].HitsAddend.GetValue() != 4 {
		t.Errorf("one value for all: %v", d)
	}
}
