package blocklog

import "math/bits"

// writer appends bits, most significant first.
type writer struct {
	b   []byte
	bit int
}

func (w *writer) put(v int64, n int) {
	for i := n - 1; i >= 0; i-- {
		if w.bit%8 == 0 {
			w.b = append(w.b, 0)
		}
		if v>>i&1 == 1 {
			w.b[w.bit/8] |= 0x80 >> (w.bit % 8)
		}
		w.bit++
	}
}

func bitlen(v int64) int { return bits.Len64(uint64(v)) }

func (w *writer) rice(d int64, k int) {
	q := d >> k
	if q < escape {
		w.put(1<<(q+1)-2, int(q)+1)
	} else {
		w.put(1<<escape-1, escape)
		w.put(int64(bitlen(q-escape)), 6)
		w.put(q-escape, bitlen(q-escape))
	}
	w.put(d-q<<k, k)
}

func (w *writer) eg(v int64, j int) {
	L := bitlen(v + 1<<j)
	w.put(0, L-1-j)
	w.put(v+1<<j, L)
}

func riceBits(d int64, k int) int {
	q := d >> k
	if q < escape {
		return int(q) + 1 + k
	}
	return escape + 6 + bitlen(q-escape) + k
}

func egBits(v int64, j int) int { return 2*bitlen(v+1<<j) - 1 - j }

// kOf is the Rice parameter for time deltas of that mean, kwOf the
// Exp-Golomb order for weights of that mean (blocklog.lua's).
func kOf(mean int64) int  { return min(52, max(0, bitlen(mean)-1)) }
func kwOf(mean int64) int { return max(0, bitlen(mean)-2) }

// encodeRun codes the entries of es that fit in one block with k and
// mode (a uniform block stops at a weight unlike its first's), with base
// its base when it holds none and cum its cum; it returns the block, the
// entries it holds, its bits and its last byte.
func encodeRun(es []Entry, k, mode int, base, cum int64) ([]byte, int, int, byte) {
	w := &writer{}
	used := 0
	if mode == 0 && len(es) > 0 {
		used = egBits(es[0].Weight-1, 0)
		w.eg(es[0].Weight-1, 0)
	}
	i := 0
	for i < len(es) && i < MaxCount {
		need := 0
		if i > 0 {
			need = riceBits(es[i].Time-es[i-1].Time, k)
		}
		if mode == 0 {
			if es[i].Weight != es[0].Weight {
				break
			}
		} else {
			need += egBits(es[i].Weight-1, mode-1)
		}
		if used+need > BlockBits {
			break
		}
		if i > 0 {
			w.rice(es[i].Time-es[i-1].Time, k)
		}
		if mode > 0 {
			w.eg(es[i].Weight-1, mode-1)
		}
		used += need
		i++
	}
	if i > 0 {
		base = es[0].Time
	}
	blk := make([]byte, BlockSize)
	putNum(blk[0:7], base)
	putNum(blk[7:13], cum%mod48)
	blk[13], blk[14], blk[15] = byte(k), byte(mode), byte(i)
	copy(blk[BlockHeader:], w.b)
	var last byte
	if used%8 > 0 {
		last = blk[BlockHeader+used/8]
	}
	return blk, i, used, last
}

func putNum(b []byte, v int64) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
}

// choose picks k and mode for a block starting at es[0], from the (up to)
// 64 entries it will likely hold; gap is the k of a block of one entry.
func choose(es []Entry, gap int64) (int, int) {
	j := min(len(es)-1, 63)
	k := kOf(max(gap, 1))
	if j > 0 {
		k = kOf((es[j].Time - es[0].Time) / int64(j))
	}
	run, sum := 1, es[0].Weight
	for run <= j && es[run].Weight == es[0].Weight {
		run++
	}
	for _, e := range es[1 : j+1] {
		sum += e.Weight
	}
	if run > j {
		return k, 0
	}
	return k, kwOf(sum/int64(j+1)) + 1
}

// class is the allocation jemalloc makes for x bytes (x > 128): four size
// classes per doubling.
func class(x int64) int64 {
	step := int64(1) << (bitlen(x-1) - 3)
	return (x + step - 1) / step * step
}

// Fit is the number of slots blocklog.lua gives a log that needs n: the
// most that fit in the allocation of n (string, sds header, its zero).
func Fit(n int64) int64 {
	hdr := func(l int64) int64 {
		if l >= 65536 {
			return 9
		}
		return 5
	}
	l := Ring + n*BlockSize
	cls := class(l + hdr(l) + 1)
	nb := (cls - 1 - hdr(cls) - Ring) / BlockSize
	if Ring+nb*BlockSize < 65536 {
		nb = (cls - 1 - 5 - Ring) / BlockSize
	}
	return max(n, nb)
}

// Build is the string blocklog.lua's build makes of entries (times not
// decreasing, weights >= 1; at least one), byte for byte: F at the first
// entry, an empty table.
func Build(es []Entry, gap int64) []byte {
	var blocks [][]byte
	l := Log{}
	var cum int64
	for i := 0; i < len(es); {
		k, mode := choose(es[i:], gap)
		blk, n, used, last := encodeRun(es[i:], k, mode, es[i].Time, cum)
		blocks = append(blocks, blk)
		if i+n == len(es) {
			l.OCum, l.OBits, l.OPart, l.OCount, l.OBase, l.OK, l.OMode = cum%mod48, used, last, n, es[i].Time, k, mode
			l.OEq = es[i].Weight
			for _, e := range es[i : i+n] {
				if e.Weight != l.OEq {
					l.OEq = 0
				}
			}
		}
		for _, e := range es[i : i+n] {
			cum += e.Weight
		}
		i += n
	}
	l.Slots, l.Last, l.Total, l.Newest = Fit(int64(len(blocks))+1), int64(len(blocks)-1), cum%mod48, es[len(es)-1].Time
	l.FTime, l.FW = es[0].Time, es[0].Weight
	_, l.FBit = decode(blocks[0][BlockHeader:], es[0].Time, int(blocks[0][13]), int(blocks[0][14]), 1)
	b := make([]byte, Ring+BlockSize*l.Slots)
	copy(b, Magic)
	putNum(b[4:6], BlockSize)
	l.putFields(b)
	for i, blk := range blocks {
		copy(b[Ring+BlockSize*i:], blk)
	}
	return b
}

func (l Log) putFields(b []byte) {
	putNum(b[6:10], l.Slots)
	putNum(b[10:17], l.First)
	putNum(b[17:24], l.Last)
	putNum(b[24:31], l.Total)
	putNum(b[31:38], l.Newest)
	b[38] = byte(l.FIndex)
	putNum(b[39:41], int64(l.FBit))
	putNum(b[41:48], l.FTime)
	putNum(b[48:55], l.FCum)
	putNum(b[55:62], l.FW)
	putNum(b[62:69], l.OBase)
	putNum(b[69:76], l.OCum)
	b[76] = byte(l.OCount)
	putNum(b[77:79], int64(l.OBits))
	b[79] = l.OPart
	putNum(b[80:87], l.OEq)
	b[87], b[88], b[89] = byte(l.OK), byte(l.OMode), byte(l.Cur)
}
