// Package units formats sizes the way every cudatap output shows them.
package units

import "fmt"

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
