package httplimit

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// forwardedBackward parses a whole Forwarded line with lastForwarded, from
// its right end: each element's for= value ("" without one), empty
// elements skipped, left to right.
func forwardedBackward(line string) ([]string, error) {
	var fors []string
	for end := len(line); ; {
		v, hasFor, empty, start, err := lastForwarded(line, end)
		if err != nil {
			return nil, err
		}
		if !empty {
			if !hasFor {
				v = ""
			}
			fors = append(fors, v)
		}
		if start < 0 {
			slices.Reverse(fors)
			return fors, nil
		}
		end = start
	}
}

// Read from its right end, a Forwarded line parses as it does from its
// left (forwardedForward, the parser walk used before it read from the
// right, which let a quoted-pair hold a control character): the same for=
// values, and an error for the same lines.
func FuzzForwardedBothEnds(f *testing.F) {
	for _, s := range []string{
		"", " ", ",", ", ,", ";", "for=1.2.3.4", `for="[2001:db8::1]:80";proto=https, for=10.0.0.1`,
		`for="a\\"`, `for="a\"b"`, `for="a\\\"b"`, `for="x", for=y`, `For=a;by=b;host="h,;=\"x"`,
		`for="`, `for="x\`, `for=a for=b`, `for=a;for=b`, "for=a ;\tproto=b ,", `=a`, `for=`, `for=""`,
		`;for=a;`, "0=\"\\\x15\"", `proto=https`, `for="a"b`, `a"b"=c`, "for=\"a\x01\"", "for=\"a\tb\"", `for=\"a"`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if len(line) > maxElement {
			return // lastForwarded refuses a longer element, the parse of old did not
		}
		want, wantErr := forwardedForward(line)
		got, err := forwardedBackward(line)
		if (err != nil) != (wantErr != nil) || !slices.Equal(got, want) {
			t.Errorf("%q: from the right %q, %v; from the left %q, %v", line, got, err, want, wantErr)
		}
	})
}

// An element of up to maxElement bytes parses; a longer one is an error,
// and lastForwarded reads no further left than maxElement bytes.
func TestForwardedElementLength(t *testing.T) {
	for _, n := range []int{maxElement, maxElement + 1} {
		elem := "for=" + strings.Repeat("a", n-len("for="))
		line := "garbage\x01\"," + elem
		v, hasFor, _, start, err := lastForwarded(line, len(line))
		if n <= maxElement && (err != nil || !hasFor || v != elem[4:] || start != len("garbage\x01\",")-1) {
			t.Errorf("%d bytes: %d %v %d %v", n, len(v), hasFor, start, err)
		}
		if n > maxElement && err == nil {
			t.Errorf("%d bytes: no error", n)
		}
	}
}

// forwardedForward parses one Forwarded field line (RFC 7239) and returns the
// for= value of each element, unquoted, left to right; "" for an element
// without for=. Empty elements are skipped. A line off the grammar is an
// error: where one element ends cannot be known, so neither can the client.
// Unquoted values may hold ':', '[' and ']', as proxies write them.
func forwardedForward(line string) ([]string, error) {
	var fors []string
	bad := func(why string) ([]string, error) {
		return nil, fmt.Errorf("the Forwarded line %s does not parse: %s", short(line), why)
	}
	i, n := 0, len(line)
	ows := func() {
		for i < n && (line[i] == ' ' || line[i] == '\t') {
			i++
		}
	}
	for {
		// One element: pairs separated by ';', up to ',' or the end.
		ows()
		elemStart := i
		var forValue string
		hasFor := false
		for i < n && line[i] != ',' {
			if line[i] == ';' {
				i++
				ows()
				continue
			}
			start := i
			for i < n && isTchar(line[i]) {
				i++
			}
			name := line[start:i]
			if name == "" || i >= n || line[i] != '=' {
				return bad("want name=value")
			}
			i++
			var value string
			if i < n && line[i] == '"' {
				var b strings.Builder
				i++
				closed := false
				for i < n {
					c := line[i]
					if c == '\\' && i+1 < n {
						if e := line[i+1]; (e < 0x20 && e != '\t') || e == 0x7f {
							return bad("a control character in a quoted string") // a quoted-pair holds none (RFC 9110 §5.6.4); added to the parser of old
						}
						b.WriteByte(line[i+1])
						i += 2
						continue
					}
					if c == '"' {
						closed = true
						i++
						break
					}
					if (c < 0x20 && c != '\t') || c == 0x7f {
						return bad("a control character in a quoted string")
					}
					b.WriteByte(c)
					i++
				}
				if !closed {
					return bad("an unterminated quoted string")
				}
				value = b.String()
			} else {
				start := i
				for i < n && (isTchar(line[i]) || line[i] == ':' || line[i] == '[' || line[i] == ']') {
					i++
				}
				value = line[start:i]
				if value == "" {
					return bad("an empty value")
				}
			}
			if strings.EqualFold(name, "for") {
				if hasFor {
					return bad("two for= in one element")
				}
				hasFor, forValue = true, value
			}
			ows()
			if i < n && line[i] != ';' && line[i] != ',' {
				return bad("want ';' or ',' after a value")
			}
		}
		switch {
		case hasFor:
			fors = append(fors, forValue)
		case i > elemStart: // pairs, or bare ';', but no for=
			fors = append(fors, "")
		}
		if i >= n {
			return fors, nil
		}
		i++ // ','
	}
}
