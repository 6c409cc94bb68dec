package service

import (
	"math"
	"testing"
	"time"
)

func TestCeilSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 0},
		{1, 1},
		{time.Second - 1, 1},
		{time.Second, 1},
		{time.Second + 1, 2},
		{1500 * time.Millisecond, 2},
		{-1, 0},
		{-500 * time.Millisecond, 0},
		{-time.Second + 1, 0},
		{-time.Second, -1},
		{-1500 * time.Millisecond, -1},
		{-2 * time.Second, -2},
		{math.MaxInt64, math.MaxInt64/int64(time.Second) + 1},
		{math.MinInt64, math.MinInt64 / int64(time.Second)},
	} {
		t.Run(tc.d.String(), func(t *testing.T) {
			if got := CeilSeconds(tc.d); got != tc.want {
				t.Errorf("CeilSeconds(%v) = %d, want %d", tc.d, got, tc.want)
			}
		})
	}
}
