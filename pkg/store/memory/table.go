package memory

import "github.com/tokengate/tokengate/pkg/bucket"

// table is a shard's bucket index: open addressing with linear probing over
// a power-of-two array of slots, keyed by the bucket's 128-bit key hash.
//
// The key is already a uniform hash, so the table never hashes it again:
// its low bits are the home slot. A decision finds its slot in one probe on
// average and updates it in place, where a Go map would hash the key twice
// (lookup, then assignment) and reach the value through its control words.
// Deletion shifts the following run of the probe sequence back (no
// tombstones), so lookups never slow down as buckets come and go. The table
// grows at 3/4 full and never shrinks (the store's cap bounds it). Slots
// hold no pointers (a bucket's version is a number, see shard.versions), so
// the garbage collector never scans the tables, however many buckets they
// hold. It is not safe for concurrent use: the shard's lock guards it.
type table struct {
	slots []slot // a slot with ver == 0 is empty
	n     int
}

type slot struct {
	h   keyHash
	s   bucket.State
	ver uint32 // the shard's reference to the bucket's version, 0 when empty
}

const minTableSize = 8

func (t *table) mask() uint64 { return uint64(len(t.slots) - 1) }

// find returns the slot of h, or nil when h is not stored.
func (t *table) find(h keyHash) *slot {
	if i, ok := t.lookup(h); ok {
		return &t.slots[i]
	}
	return nil
}

// lookup returns the index of h's slot and whether h is stored.
func (t *table) lookup(h keyHash) (uint64, bool) {
	if t.n == 0 {
		return 0, false
	}
	m := t.mask()
	for i := h.b & m; ; i = (i + 1) & m {
		switch sl := &t.slots[i]; {
		case sl.ver == 0:
			return 0, false
		case sl.h == h:
			return i, true
		}
	}
}

// insert stores a bucket whose hash is not in the table yet.
func (t *table) insert(h keyHash, s bucket.State, ver uint32) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	t.place(slot{h, s, ver})
	t.n++
}

func (t *table) place(sl slot) {
	m := t.mask()
	i := sl.h.b & m
	for t.slots[i].ver != 0 {
		i = (i + 1) & m
	}
	t.slots[i] = sl
}

func (t *table) grow() {
	old := t.slots
	t.slots = make([]slot, max(minTableSize, 2*len(old)))
	for _, sl := range old {
		if sl.ver != 0 {
			t.place(sl)
		}
	}
}

// remove empties slot i and shifts back the entries after it that would no
// longer be found across the hole.
func (t *table) remove(i uint64) {
	m := t.mask()
	for j := (i + 1) & m; t.slots[j].ver != 0; j = (j + 1) & m {
		// The entry at j may fill the hole at i only if its home slot is
		// not cyclically within (i, j].
		home := t.slots[j].h.b & m
		if (j-home)&m >= (j-i)&m {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot{}
	t.n--
}
