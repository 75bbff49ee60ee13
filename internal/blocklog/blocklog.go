// Package blocklog reads and writes the block log (blocklog.lua at the
// module's root): the compact log's next format, a Redis string holding a
// header, a table of the last admissions and refunds, and a ring of
// fixed-size blocks of Rice-coded entries, one entry per admission with
// its weight. blocklog.lua's header comment is the format's definition;
// this package follows it byte for byte, so that tests and `slidelog
// inspect` can read what the scripts write, and tests can make what a
// conversion would.
package blocklog

import (
	"bytes"
	"errors"
	"fmt"
)

// The layout (blocklog.lua's header comment).
const (
	Magic       = "slb1"
	BlockSize   = 512 // bytes of a block
	BlockHeader = 16  // bytes of a block's header
	Fields      = 96  // bytes of the header before the table
	Table       = 96  // offset of the table
	TableSize   = 16  // its entries, 16 bytes each
	Ring        = 352 // offset of the ring
	BlockBits   = 8 * (BlockSize - BlockHeader)
	MaxCount    = 255 // entries of a block
	escape      = 16  // Rice's unary part at which its escape starts
	mod48       = 1 << 48
)

// Entry is one admission: its time (µs) and weight.
type Entry struct {
	Time, Weight int64
}

// Block is one block of the ring as read.
type Block struct {
	Seq     int64 // its sequence number (slot Seq mod Slots)
	Base    int64 // its first entry's time
	Cum     int64 // the weight before it, mod 2^48
	K, Mode int   // Rice parameter; 0 uniform, else 1 + the Exp-Golomb order of weights
	Entries []Entry
	Bits    int // the bits its entries take
	Last    byte
	raw     []byte
}

// TableEntry is an admission (Kind 'a') or a refund ('r') the log
// remembers: its id and time.
type TableEntry struct {
	ID   [8]byte
	Time int64
	Kind byte
}

// Log is a block log as read from its string.
type Log struct {
	Slots       int64 // NB
	First, Last int64 // fb, last: the blocks held
	Total       int64 // C
	Newest      int64
	// F, the first entry not known to have expired
	FIndex int
	FBit   int
	FTime  int64
	FCum   int64
	FW     int64
	// the open block
	OBase, OCum int64
	OCount      int
	OBits       int
	OPart       byte
	OEq         int64
	OK, OMode   int
	Cur         int
	Blocks      []Block // First..Last
	Table       []TableEntry
}

// Is reports whether b is a block log's string (by its first bytes).
func Is(b []byte) bool { return bytes.HasPrefix(b, []byte(Magic)) }

func num(b []byte) int64 {
	var v int64
	for _, c := range b {
		v = v<<8 | int64(c)
	}
	return v
}

// reader reads bits, most significant first.
type reader struct {
	b   []byte
	bit int
}

func (r *reader) get(n int) int64 {
	var v int64
	for ; n > 0; n-- {
		var c byte
		if r.bit/8 < len(r.b) {
			c = r.b[r.bit/8]
		}
		v = v<<1 | int64(c>>(7-r.bit%8)&1)
		r.bit++
	}
	return v
}

func (r *reader) eg(j int) int64 {
	z := 0
	for r.get(1) == 0 {
		z++
		if z > 60 {
			return -1
		}
	}
	return int64(1)<<(z+j) + r.get(z+j) - int64(1)<<j
}

func (r *reader) rice(k int) int64 {
	q := int64(0)
	for q < escape && r.get(1) == 1 {
		q++
	}
	if q == escape {
		q += r.get(int(r.get(6)))
	}
	return q<<k + r.get(k)
}

// decode reads count entries of a block's bits.
func decode(bits []byte, base int64, k, mode, count int) ([]Entry, int) {
	r := &reader{b: bits}
	var w int64
	if mode == 0 && count > 0 {
		w = r.eg(0) + 1
	}
	es := make([]Entry, 0, count)
	t := base
	for i := 0; i < count; i++ {
		if i > 0 {
			t += r.rice(k)
		}
		wi := w
		if mode > 0 {
			wi = r.eg(mode-1) + 1
		}
		es = append(es, Entry{t, wi})
	}
	return es, r.bit
}

// Parse reads a block log's whole string and checks it: every field of
// its header against its blocks, the blocks' weights against each other.
func Parse(b []byte) (Log, error) {
	if !Is(b) || len(b) < Ring {
		return Log{}, errors.New("blocklog: not a block log")
	}
	if s := num(b[4:6]); s != BlockSize {
		return Log{}, fmt.Errorf("blocklog: blocks of %d bytes", s)
	}
	l := Log{Slots: num(b[6:10]), First: num(b[10:17]), Last: num(b[17:24]), Total: num(b[24:31]),
		Newest: num(b[31:38]), FIndex: int(b[38]), FBit: int(num(b[39:41])), FTime: num(b[41:48]),
		FCum: num(b[48:55]), FW: num(b[55:62]), OBase: num(b[62:69]), OCum: num(b[69:76]),
		OCount: int(b[76]), OBits: int(num(b[77:79])), OPart: b[79], OEq: num(b[80:87]), OK: int(b[87]),
		OMode: int(b[88]), Cur: int(b[89])}
	if want := Ring + BlockSize*l.Slots; int64(len(b)) != want {
		return Log{}, fmt.Errorf("blocklog: %d bytes, want %d for %d slots", len(b), want, l.Slots)
	}
	if l.Slots < 1 || l.Last < l.First || l.Last-l.First >= l.Slots || l.Cur >= TableSize {
		return Log{}, fmt.Errorf("blocklog: blocks %d..%d in %d slots, table entry %d", l.First, l.Last, l.Slots, l.Cur)
	}
	for i := 0; i < TableSize; i++ {
		e := (l.Cur - 1 - i + 2*TableSize) % TableSize
		o := Table + 16*e
		if b[o+15] == 0 {
			continue
		}
		var en TableEntry
		copy(en.ID[:], b[o:o+8])
		en.Time, en.Kind = num(b[o+8:o+15]), b[o+15]
		l.Table = append(l.Table, en)
	}
	for s := l.First; s <= l.Last; s++ {
		o := Ring + BlockSize*(s%l.Slots)
		raw := b[o : o+BlockSize]
		bl := Block{Seq: s, Base: num(raw[0:7]), Cum: num(raw[7:13]), K: int(raw[13]), Mode: int(raw[14]), raw: raw}
		count := int(raw[15])
		if s == l.Last {
			count = l.OCount
		}
		if bl.K > 52 {
			return Log{}, fmt.Errorf("blocklog: block %d: k %d", s, bl.K)
		}
		bl.Entries, bl.Bits = decode(raw[BlockHeader:], bl.Base, bl.K, bl.Mode, count)
		if bl.Bits > BlockBits {
			return Log{}, fmt.Errorf("blocklog: block %d: %d bits", s, bl.Bits)
		}
		if bl.Bits%8 > 0 {
			bl.Last = raw[BlockHeader+bl.Bits/8]
		}
		l.Blocks = append(l.Blocks, bl)
	}
	return l, l.check()
}

func (l *Log) check() error {
	prev := int64(-1)
	for i, bl := range l.Blocks {
		if len(bl.Entries) > 0 && bl.Entries[0].Time != bl.Base {
			return fmt.Errorf("blocklog: block %d: base %d, first entry at %d", bl.Seq, bl.Base, bl.Entries[0].Time)
		}
		if bl.Base < prev && len(bl.Entries) > 0 {
			return fmt.Errorf("blocklog: block %d: base %d before %d", bl.Seq, bl.Base, prev)
		}
		sum := int64(0)
		for _, e := range bl.Entries {
			if e.Time < prev || e.Weight < 1 {
				return fmt.Errorf("blocklog: block %d: entry %+v after %d", bl.Seq, e, prev)
			}
			prev = e.Time
			sum += e.Weight
		}
		for j := BlockHeader + (bl.Bits+7)/8; j < BlockSize; j++ {
			if bl.raw[j] != 0 {
				return fmt.Errorf("blocklog: block %d: byte %d past its bits is %d", bl.Seq, j, bl.raw[j])
			}
		}
		if bl.Bits%8 > 0 && bl.raw[BlockHeader+bl.Bits/8]&(0xff>>(bl.Bits%8)) != 0 {
			return fmt.Errorf("blocklog: block %d: bits past its entries", bl.Seq)
		}
		next := l.Total
		if i+1 < len(l.Blocks) {
			next = l.Blocks[i+1].Cum
		}
		if (bl.Cum+sum)%mod48 != next {
			return fmt.Errorf("blocklog: block %d: cum %d + %d, next %d", bl.Seq, bl.Cum, sum, next)
		}
	}
	if prev > l.Newest {
		return fmt.Errorf("blocklog: newest %d before an entry at %d", l.Newest, prev)
	}
	o := l.Blocks[len(l.Blocks)-1]
	if o.Cum != l.OCum || o.Bits != l.OBits || o.Last != l.OPart || o.Mode != l.OMode || o.K != l.OK {
		return fmt.Errorf("blocklog: open block: header says cum %d bits %d part %d mode %d k %d; it has %d %d %d %d %d",
			l.OCum, l.OBits, l.OPart, l.OMode, l.OK, o.Cum, o.Bits, o.Last, o.Mode, o.K)
	}
	if n := len(o.Entries); n > 0 {
		if o.Base != l.OBase || o.Entries[n-1].Time != l.Newest {
			return fmt.Errorf("blocklog: open block: base %d (header %d), last %d (newest %d)", o.Base, l.OBase, o.Entries[n-1].Time, l.Newest)
		}
		eq := o.Entries[0].Weight
		for _, e := range o.Entries {
			if e.Weight != eq {
				eq = 0
			}
		}
		if eq != l.OEq {
			return fmt.Errorf("blocklog: open block: oeq %d, its weights say %d", l.OEq, eq)
		}
	}
	// F
	f := l.Blocks[0]
	if l.FCum == l.Total {
		if l.First != l.Last || l.FIndex != l.OCount || l.FBit != l.OBits {
			return fmt.Errorf("blocklog: F at the end but at block %d entry %d bit %d", l.First, l.FIndex, l.FBit)
		}
		return nil
	}
	if l.FIndex >= len(f.Entries) {
		return fmt.Errorf("blocklog: F at entry %d of a block of %d", l.FIndex, len(f.Entries))
	}
	cum := f.Cum
	for _, e := range f.Entries[:l.FIndex] {
		cum += e.Weight
	}
	_, bit := decode(f.raw[BlockHeader:], f.Base, f.K, f.Mode, l.FIndex+1)
	if e := f.Entries[l.FIndex]; e.Time != l.FTime || e.Weight != l.FW || cum%mod48 != l.FCum || bit != l.FBit {
		return fmt.Errorf("blocklog: F says %d/%d cum %d bit %d, entry is %+v cum %d bit %d", l.FTime, l.FW, l.FCum, l.FBit, e, cum%mod48, bit)
	}
	return nil
}

// Held is the log's entries from F on, oldest first: every live entry,
// and maybe some that have expired.
func (l Log) Held() []Entry {
	var es []Entry
	for i, bl := range l.Blocks {
		from := 0
		if i == 0 {
			from = l.FIndex
		}
		if from < len(bl.Entries) {
			es = append(es, bl.Entries[from:]...)
		}
	}
	return es
}

// Live is the weight of the entries in the window (cutoff, ∞).
func (l Log) Live(cutoff int64) int64 {
	n := int64(0)
	for _, e := range l.Held() {
		if e.Time > cutoff {
			n += e.Weight
		}
	}
	return n
}
