package units

import "testing"

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
