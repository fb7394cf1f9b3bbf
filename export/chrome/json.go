package chrome

import (
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/cudatap/cudatap/tracer/event"
)

// The trace is built by appending to one reused buffer per event: a
// recording holds millions of calls, and encoding/json would allocate and
// reflect for every one of them.

// key appends `"k":`, preceded by a comma unless it opens an object.
func (w *Writer) key(k string) {
	if w.sep {
		w.b = append(w.b, ',')
	}
	w.sep = true
	w.b = append(w.b, '"')
	w.b = append(w.b, k...)
	w.b = append(w.b, '"', ':')
}

func (w *Writer) str(k, v string) {
	w.key(k)
	w.b = appendString(w.b, v)
}

func (w *Writer) int(k string, v int64) {
	w.key(k)
	w.b = strconv.AppendInt(w.b, v, 10)
}

func (w *Writer) uint(k string, v uint64) {
	w.key(k)
	w.b = strconv.AppendUint(w.b, v, 10)
}

func (w *Writer) bool(k string, v bool) {
	w.key(k)
	w.b = strconv.AppendBool(w.b, v)
}

// micros appends ns as fractional µs with exactly three decimals. Integer
// arithmetic keeps it exact: absolute monotonic times exceed the 2^53 ns a
// float64 holds without rounding after about 100 days of uptime.
func (w *Writer) micros(k string, ns uint64) {
	w.key(k)
	w.b = strconv.AppendUint(w.b, ns/1000, 10)
	frac := ns % 1000
	w.b = append(w.b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
}

// dim3 appends a launch dimension as the array [x, y, z], as Kineto does.
func (w *Writer) dim3(k string, d event.Dim3) {
	w.key(k)
	w.b = append(w.b, '[')
	w.b = strconv.AppendUint(w.b, uint64(d.X), 10)
	w.b = append(w.b, ',')
	w.b = strconv.AppendUint(w.b, uint64(d.Y), 10)
	w.b = append(w.b, ',')
	w.b = strconv.AppendUint(w.b, uint64(d.Z), 10)
	w.b = append(w.b, ']')
}

// open starts a nested object under k; close ends it.
func (w *Writer) open(k string) {
	w.key(k)
	w.b = append(w.b, '{')
	w.sep = false
}

func (w *Writer) close() {
	w.b = append(w.b, '}')
	w.sep = true
}

// appendString appends s as a JSON string. strconv.AppendQuote is not used
// because its Go escapes (\x1b, \a, \v, \xff) are not JSON, and names come
// from /proc and ELF files that may hold any byte.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
		}
		b = append(b, s[start:i]...)
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default: // invalid UTF-8
			b = append(b, `\ufffd`...)
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// float appends a counter value under a caller-chosen key, so the key is
// escaped too. JSON has no NaN or infinity: those become null.
func (w *Writer) float(k string, v float64) {
	if w.sep {
		w.b = append(w.b, ',')
	}
	w.sep = true
	w.b = appendString(w.b, k)
	w.b = append(w.b, ':')
	if math.IsNaN(v) || math.IsInf(v, 0) {
		w.b = append(w.b, "null"...)
		return
	}
	w.b = strconv.AppendFloat(w.b, v, 'g', -1, 64)
}
