package symbolize

import (
	"testing"

	"github.com/cudatap/cudatap/internal/testutil"
)

// The index's own benchmarks (200k symbols) are internal/objfile's.

// BenchmarkProcessSymbolize measures the whole path for a live process:
// runtime address → mapping → file → symbol → demangled name.
func BenchmarkProcessSymbolize(b *testing.B) {
	fx := testutil.ELF(b)
	c := testutil.StartChild(b, fx.PIE)
	p, err := NewProcess(c.Pid(), nil)
	if err != nil {
		b.Fatal(err)
	}
	addrs := []uint64{c.MainAddr, c.TwiceAddr, c.LibAddr}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if fr := p.Symbolize(addrs[i%3]); fr.Raw == "" {
			b.Fatalf("unresolved: %+v", fr)
		}
		i++
	}
}

// BenchmarkDemangleShorten measures the display path for a typical
// PyTorch kernel name.
func BenchmarkDemangleShorten(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		Shorten(Demangle(fillKernel), 80)
	}
}
