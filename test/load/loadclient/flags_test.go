package main

import (
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	c, err := parseFlags([]string{"-addr", "[::1]:9000", "-c", "8", "-conns", "2", "-d", "2s", "-warmup", "0s",
		"-hot", "-order", "seq", "-hits", "3", "-rate", "1000", "-pids", "srv=1", "-name", "x"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "[::1]:9000" || c.Workers != 8 || c.Conns != 2 || c.Duration != 2*time.Second || c.Warmup != 0 ||
		!c.Hot || !c.Sequential || c.Hits != 3 || c.Rate != 1000 || len(c.Pids) != 1 || c.Name != "x" {
		t.Errorf("parsed %+v", c)
	}
	for _, args := range [][]string{
		{"-addr", "192.168.1.1:8081"},
		{"-order", "zigzag"},
		{"-hits", "4294967296"},
		{"-c", "2", "-conns", "3"},
		{"-d", "0s"},
		{"-rate", "-1"},
		{"-keys", "0"},
		{"-descs", "0"},
		{"-pids", "srv"},
		{"extra"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
}
