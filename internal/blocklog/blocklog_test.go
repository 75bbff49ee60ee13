package blocklog

import (
	"math/rand"
	"testing"
)

// TestBuildParse builds logs of every kind of trace in Go and reads them
// back: the entries are the ones built and every header field checks.
func TestBuildParse(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	for _, n := range []int{1, 2, 64, 255, 256, 1000, 10000} {
		for _, kind := range []string{"unit", "mixed", "runs", "huge"} {
			es := trace(r, n, kind)
			lg, err := Parse(Build(es, 86400))
			if err != nil {
				t.Fatalf("%d %s: %v", n, kind, err)
			}
			h := lg.Held()
			if len(h) != len(es) {
				t.Fatalf("%d %s: %d entries, built %d", n, kind, len(h), len(es))
			}
			for i := range h {
				if h[i] != es[i] {
					t.Fatalf("%d %s: entry %d is %+v, built %+v", n, kind, i, h[i], es[i])
				}
			}
		}
	}
}

// TestFit: a log's string fills a jemalloc size class (4 per doubling)
// with its sds header and terminating zero, and has room for what it
// needs.
func TestFit(t *testing.T) {
	for n := int64(1); n < 100000; n = n*9/8 + 1 {
		nb := Fit(n)
		l := Ring + nb*BlockSize
		hdr := int64(5)
		if l >= 65536 {
			hdr = 9
		}
		if nb < n || class(l+hdr+1) != class(Ring+n*BlockSize+hdr+1) && class(l+hdr+1) > class(Ring+n*BlockSize+9+1) {
			t.Fatalf("Fit(%d) = %d: %d bytes, class %d", n, nb, l, class(l+hdr+1))
		}
	}
	for _, c := range []struct{ x, want int64 }{{1024, 1024}, {1025, 1280}, {262144, 262144}, {262145, 327680}, {2621440, 2621440}, {2621441, 3145728}} {
		if got := class(c.x); got != c.want {
			t.Errorf("class(%d) = %d, want %d", c.x, got, c.want)
		}
	}
}
