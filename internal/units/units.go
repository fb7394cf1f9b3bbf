// Package units formats sizes the way every cudatap output shows them.
package units

import (
	"fmt"
	"strings"
)

// Bytes formats n with binary prefixes: "512 B", "1.5 KiB", "2.0 GiB".
func Bytes(n uint64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	const prefixes = "KMGTPE"
	v, i := float64(n)/1024, 0
	for v >= 1024 && i < len(prefixes)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, prefixes[i])
}

// Duration formats ns in the largest unit that keeps the number at or
// above 1: "850 ns", "1.5 µs", "12.3 ms", "4.20 s".
func Duration(ns uint64) string {
	switch {
	case ns < 1e3:
		return fmt.Sprintf("%d ns", ns)
	case ns < 1e6:
		return fmt.Sprintf("%.1f µs", float64(ns)/1e3)
	case ns < 1e9:
		return fmt.Sprintf("%.1f ms", float64(ns)/1e6)
	}
	return fmt.Sprintf("%.2f s", float64(ns)/1e9)
}

// Offset formats ns to the microsecond, in the unit Duration would pick:
// "850 ns", "17 µs", "24.2 ms", "3.700803 s". It is for a point in time
// (the time since a recording began) and for clock offsets and their
// ranges, where Duration's three digits would make "+3.700803 s" and
// "+3.6992 s" both "3.70 s".
func Offset(ns uint64) string {
	if ns < 1e3 {
		return fmt.Sprintf("%d ns", ns)
	}
	us := (ns + 500) / 1e3
	switch {
	case us < 1e3:
		return fmt.Sprintf("%d µs", us)
	case us < 1e6:
		return trimZeros(fmt.Sprintf("%.3f", float64(us)/1e3)) + " ms"
	}
	return trimZeros(fmt.Sprintf("%.6f", float64(us)/1e6)) + " s"
}

// SignedOffset is Offset with a sign: "+24.2 ms", "-3.6992 s".
func SignedOffset(ns int64) string {
	if ns < 0 {
		return "-" + Offset(uint64(-ns))
	}
	return "+" + Offset(uint64(ns))
}

func trimZeros(s string) string {
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}
