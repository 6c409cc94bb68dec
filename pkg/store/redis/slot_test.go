package redis

import (
	"testing"

	"pgregory.net/rapid"
)

// TestSlotOf: the table-driven CRC16 (eight bytes at a time, then one)
// is the Cluster specification's, bit by bit, for any tag, and gives the
// slots Redis 7.0.15's CLUSTER KEYSLOT answered for these keys.
func TestSlotOf(t *testing.T) {
	for key, want := range map[string]uint16{
		"123456789": 12739, // CRC16 0x31C3, the specification's check value
		"foo":       12182,
		"bar":       5061,
		"tokengate:{ffe366d915ac41364b532ce078e01f83}": 5535,
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, Redis says %d", key, got, want)
		}
	}
	rapid.Check(t, func(rt *rapid.T) {
		tag := rapid.String().Draw(rt, "tag")
		if got, want := slotOf(tag), bitwiseSlot(tag); got != want {
			rt.Fatalf("slotOf(%q) = %d, bit by bit %d", tag, got, want)
		}
	})
}

// bitwiseSlot is the specification's CRC16-XMODEM, one bit at a time,
// modulo 16384.
func bitwiseSlot(t string) uint16 {
	var crc uint16
	for i := 0; i < len(t); i++ {
		crc ^= uint16(t[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc & 16383
}

func BenchmarkKeySlot(b *testing.B) {
	key := "tokengate:{ffe366d915ac41364b532ce078e01f83}"
	b.ReportAllocs()
	for b.Loop() {
		keySlot(key)
	}
}
