package objfile

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/cudatap/cudatap/internal/testutil"
)

// bigLib is a shared library with 200k functions, about the size of
// libtorch_cuda.so's .symtab (~210k entries), with long C++-style names.
// Half are exported (.dynsym), half hidden (.symtab only); every 16th
// function has no size.
type bigLib struct {
	path  string
	addrs []uint64 // ELF vaddrs of the functions, for BenchmarkSymbolize
	names []string
}

const bigLibSymbols = 200_000

var (
	bigOnce sync.Once
	big     *bigLib
	bigErr  error
)

func bigName(i int) string {
	// Realistic length (~110 bytes) and shape: a templated kernel.
	return fmt.Sprintf("_ZN2at6native12_GLOBAL__N_121kernel_impl_%07dIN3c104HalfELi4EEEvRNS_18TensorIteratorBaseERKNS_6detail5ArrayIPcLi3EEE", i)
}

func getBigLib(tb testing.TB) *bigLib {
	tb.Helper()
	cc := testutil.Compiler(tb, "cc")
	bigOnce.Do(func() {
		var dir string
		if dir, bigErr = testutil.BuildDir("big"); bigErr != nil {
			return
		}
		asm := filepath.Join(dir, "big.s")
		fd, err := os.Create(asm)
		if err != nil {
			bigErr = err
			return
		}
		w := bufio.NewWriter(fd)
		fmt.Fprintln(w, ".text")
		for i := range bigLibSymbols {
			name := bigName(i)
			vis := ".globl"
			if i%2 == 1 {
				vis = ".hidden " + name + "\n.globl"
			}
			size := fmt.Sprintf(".size %s, .-%s\n", name, name)
			if i%16 == 0 {
				size = ""
			}
			// Each function: a few bytes of code, so sizes differ.
			fmt.Fprintf(w, "%s %s\n.type %s, @function\n%s:\n\tnop\n\tnop\n\tret\n%s", vis, name, name, name, size)
		}
		fmt.Fprintln(w, `.section .note.GNU-stack,"",@progbits`)
		if err := w.Flush(); err != nil {
			bigErr = err
			return
		}
		fd.Close()
		lib := filepath.Join(dir, "libbig.so")
		if bigErr = testutil.Run(dir, cc, "-shared", "-nostdlib", "-Wl,--build-id", "-o", lib, asm); bigErr != nil {
			return
		}
		f, err := Open(lib)
		if err != nil {
			bigErr = err
			return
		}
		defer f.Close()
		b := &bigLib{path: lib}
		for i := range bigLibSymbols {
			if i%997 == 0 || len(b.names) < 1000 {
				name := bigName(i)
				s, ok := f.Lookup(name)
				if !ok {
					bigErr = fmt.Errorf("%s not found in generated library", name)
					return
				}
				b.names = append(b.names, name)
				b.addrs = append(b.addrs, s.Value+1)
			}
		}
		big = b
	})
	if bigErr != nil {
		tb.Fatal(bigErr)
	}
	return big
}

// TestBigLib checks the index on the 200k-symbol library.
func TestBigLib(t *testing.T) {
	if testing.Short() {
		t.Skip("generating a 200k-symbol library takes a few seconds")
	}
	b := getBigLib(t)
	f := openT(t, b.path)
	if err := f.Index(); err != nil {
		t.Fatal(err)
	}
	ix := f.full.Load()
	if ix.nfunc != bigLibSymbols {
		t.Errorf("indexed %d functions, want %d (duplicates from .dynsym not removed?)", len(ix.ents), bigLibSymbols)
	}
	for i, name := range b.names {
		s, off, ok := f.Symbolize(b.addrs[i])
		if !ok || s.Name != name || off != 1 {
			t.Fatalf("Symbolize(%#x) = %+v+%d, %v; want %s+1", b.addrs[i], s, off, ok, name)
		}
	}
	// Sizeless function 0 extends to function 1 (3 bytes: nop nop ret).
	s0, _ := f.Lookup(bigName(0))
	if s0.Size != 0 {
		t.Errorf("function 0 has size %d, want 0", s0.Size)
	}
	if s, off, ok := f.Symbolize(s0.Value + 2); !ok || s.Name != bigName(0) || off != 2 {
		t.Errorf("Symbolize(f0+2) = %+v+%d, %v", s, off, ok)
	}
	if s, ok := f.LookupDynamic(bigName(1)); ok {
		t.Errorf("hidden function found in .dynsym: %+v", s)
	}
	if s, ok := f.LookupDynamic(bigName(2)); !ok || !s.Dynamic {
		t.Errorf("LookupDynamic(exported) = %+v, %v", s, ok)
	}
}

// TestIndexHoldsNoNames checks that the index of the 200k-symbol library
// keeps its symbols but not its string tables (35 MB here; 165 MB for
// PyTorch's libraries on a GPU node): names are read from the file when a
// lookup needs one, so what indexing leaves on the heap is the entries and
// the hash table, however long the names are.
func TestIndexHoldsNoNames(t *testing.T) {
	if testing.Short() {
		t.Skip("generating a 200k-symbol library takes a few seconds")
	}
	b := getBigLib(t)
	f := openT(t, b.path)
	before := heapInUse()
	if err := f.Index(); err != nil {
		t.Fatal(err)
	}
	held := heapInUse() - before
	ix := f.full.Load()
	own := int64(cap(ix.ents))*int64(unsafe.Sizeof(symEntry{})) + 4*int64(len(ix.table))
	var strtabs uint64
	for _, tab := range []int{f.dynsym, f.symtab} {
		strtabs += f.sections[f.sections[tab].link].size
	}
	t.Logf("indexing held %.1f MB: entries and hash table %.1f MB; string tables %.1f MB",
		float64(held)/1e6, float64(own)/1e6, float64(strtabs)/1e6)
	if held > own+4<<20 {
		t.Errorf("indexing held %d bytes, %d more than its entries and hash table (the string tables are %d bytes)",
			held, held-own, strtabs)
	}
	if s, _, ok := f.Symbolize(b.addrs[0]); !ok || s.Name != b.names[0] {
		t.Errorf("Symbolize(%#x) = %q, %v; want %s", b.addrs[0], s.Name, ok, b.names[0])
	}
}

// heapInUse returns the bytes of live heap objects after a collection.
func heapInUse() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// BenchmarkIndex200k measures Open plus building the full index of a
// 200k-symbol library: the cost paid the first time an address in a
// library like libtorch_cuda.so is symbolized.
func BenchmarkIndex200k(b *testing.B) {
	lib := getBigLib(b)
	b.ReportAllocs()
	for b.Loop() {
		f, err := Open(lib.path)
		if err != nil {
			b.Fatal(err)
		}
		if err := f.Index(); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

// BenchmarkIndexDynamic200k is the same for the .dynsym-only index used by
// LookupDynamic (100k exported symbols).
func BenchmarkIndexDynamic200k(b *testing.B) {
	lib := getBigLib(b)
	b.ReportAllocs()
	for b.Loop() {
		f, err := Open(lib.path)
		if err != nil {
			b.Fatal(err)
		}
		if _, ok := f.LookupDynamic("cudaLaunchKernel"); ok {
			b.Fatal("found")
		}
		f.Close()
	}
}

// BenchmarkSymbolize measures vaddr → symbol on an indexed 200k-symbol
// file.
func BenchmarkSymbolize(b *testing.B) {
	lib := getBigLib(b)
	f, err := Open(lib.path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	f.Index()
	r := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok := f.Symbolize(lib.addrs[r.IntN(len(lib.addrs))]); !ok {
			b.Fatal("not found")
		}
	}
}

// BenchmarkLookup measures name → symbol on an indexed 200k-symbol file.
func BenchmarkLookup(b *testing.B) {
	lib := getBigLib(b)
	f, err := Open(lib.path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	f.Index()
	r := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := f.Lookup(lib.names[r.IntN(len(lib.names))]); !ok {
			b.Fatal("not found")
		}
	}
}
