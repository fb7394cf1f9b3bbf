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
