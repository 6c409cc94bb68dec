package main

import (
	"os"
	"reflect"
	"testing"
)

func TestParseStatTicks(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       uint64
		wantErr    bool
	}{
		{"plain", "42 (noop) S 1 42 42 0 -1 4194560 100 0 0 0 150 25 0 0 20 0 5 0 100 0 0", 175, false},
		{"spaces and parens in the name", "42 (a) b (c) R 1 42 42 0 -1 0 0 0 0 0 7 3 0 0", 10, false},
		{"no name", "42 S 1", 0, true},
		{"too short", "42 (x) S 1 2 3", 0, true},
		{"not a number", "42 (x) S 1 42 42 0 -1 0 0 0 0 0 x 3 0 0", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatTicks([]byte(tc.stat))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("parseStatTicks = %d, %v; want %d, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
	if _, err := procCPU(os.Getpid()); err != nil {
		t.Errorf("procCPU(self): %v", err)
	}
}

func TestParsePids(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []proc
		wantErr bool
	}{
		{"", nil, false},
		{"srv=12", []proc{{"srv", 12}}, false},
		{"srv=12,redis=34", []proc{{"srv", 12}, {"redis", 34}}, false},
		{"srv", nil, true},
		{"=12", nil, true},
		{"srv=-1", nil, true},
		{"srv=12,", nil, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parsePids(tc.in)
			if (err != nil) != tc.wantErr || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("parsePids(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}
