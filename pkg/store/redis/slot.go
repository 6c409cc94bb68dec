package redis

import (
	"encoding/hex"
	"strings"
)

// slotOf is the Redis Cluster hash slot of a key whose hash tag is t:
// CRC16-XMODEM of the tag, modulo 16384 (the Cluster specification),
// eight bytes at a time from crcTables. A Cluster store computes it
// several times a key (routing, batching, node calls); bit by bit it was
// an eighth of the server's CPU at vs-peer's CLUSTER=1 load.
func slotOf(t string) uint16 {
	var crc uint16
	x := &crcTables
	for ; len(t) >= 8; t = t[8:] {
		// The CRC is linear: each byte's part is its own table's, and
		// the eight lookups do not wait on one another.
		crc = x[7][byte(crc>>8)^t[0]] ^ x[6][byte(crc)^t[1]] ^ x[5][t[2]] ^ x[4][t[3]] ^
			x[3][t[4]] ^ x[2][t[5]] ^ x[1][t[6]] ^ x[0][t[7]]
	}
	for i := 0; i < len(t); i++ {
		crc = crc<<8 ^ x[0][byte(crc>>8)^t[i]]
	}
	return crc & 16383
}

// crcTables[k][b] is the CRC16-XMODEM register (polynomial 0x1021, no
// reflection) after byte b and then k zero bytes, from zero.
var crcTables = func() (t [8][256]uint16) {
	for b := range t[0] {
		crc := uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[0][b] = crc
	}
	for k := 1; k < len(t); k++ {
		for b, crc := range t[k-1] {
			t[k][b] = crc<<8 ^ t[0][crc>>8]
		}
	}
	return t
}()

// bySlot groups item indices by the hash slot of their tags raw, in order
// of first appearance: the first group holds item 0.
func bySlot(raw [][16]byte) [][]int {
	var groups [][]int
	var slots []uint16
	for i, t := range raw {
		sl := tagSlot(t)
		g := -1
		for j, x := range slots {
			if x == sl {
				g = j
				break
			}
		}
		if g < 0 {
			slots = append(slots, sl)
			groups = append(groups, nil)
			g = len(groups) - 1
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// keySlot is the hash slot of a key: of its hash tag, the part between
// the first '{' and the next '}' when that is not empty, else of the
// whole key (the Cluster specification).
func keySlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return slotOf(key[i+1 : i+1+j])
		}
	}
	return slotOf(key)
}

// tagSlot is the hash slot of the bucket of tag t (its key's hash tag is
// t in hex).
func tagSlot(t [16]byte) uint16 {
	var h [32]byte
	hex.Encode(h[:], t[:])
	return slotOf(string(h[:]))
}
