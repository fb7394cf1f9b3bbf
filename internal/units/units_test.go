package units

import (
	"math"
	"testing"
)

func TestBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 1 << 20: "1.0 MiB",
		3 << 30: "3.0 GiB", 1 << 62: "4.0 EiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestDuration(t *testing.T) {
	for ns, want := range map[uint64]string{0: "0 ns", 999: "999 ns", 1500: "1.5 µs", 12_340_000: "12.3 ms", 4_200_000_000: "4.20 s"} {
		if got := Duration(ns); got != want {
			t.Errorf("Duration(%d) = %q, want %q", ns, got, want)
		}
	}
}

func TestOffset(t *testing.T) {
	for ns, want := range map[uint64]string{0: "0 ns", 999: "999 ns", 1000: "1 µs", 17_400: "17 µs", 999_499: "999 µs", 999_500: "1 ms",
		24_200_000: "24.2 ms", 1_603_000: "1.603 ms", 3_700_803_000: "3.700803 s", 3_699_200_000: "3.6992 s", 2_000_000_000: "2 s"} {
		if got := Offset(ns); got != want {
			t.Errorf("Offset(%d) = %q, want %q", ns, got, want)
		}
	}
	for ns, want := range map[int64]string{0: "+0 ns", -3_675_000_000: "-3.675 s", 24_200_000: "+24.2 ms", math.MinInt64 + 1: "-9223372036.854776 s"} {
		if got := SignedOffset(ns); got != want {
			t.Errorf("SignedOffset(%d) = %q, want %q", ns, got, want)
		}
	}
}
