package unwind

import (
	"debug/elf"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/cudatap/cudatap/internal/objfile"
)

func TestUnwindChain(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			exe := fixture(t, v)
			checkVariant(t, exe, v)
			for _, depth := range []int{0, 3} {
				c := runFixture(t, exe, depth)
				u := New()
				pcs := u.Unwind(c.proc, c.regs, c.stack, 64)
				got := names(c.proc, pcs)
				t.Logf("depth %d: %d bytes of stack, frames %v", depth, len(c.stack), got)
				want := expectedChain(depth)
				if len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
					t.Fatalf("depth %d: unwound\n  %v\nwant prefix\n  %v", depth, got, want)
				}
				// The snapshot reaches the top of the stack, so the walk
				// must go through libc to _start, whose CFI ends it.
				if last := got[len(got)-1]; last != "_start" {
					t.Errorf("depth %d: outermost frame %q, want _start", depth, last)
				}
				if len(got) > len(want)+4 {
					t.Errorf("depth %d: %d frames after main: %v", depth, len(got)-len(want), got[len(want):])
				}
				// max bounds the result.
				if short := u.Unwind(c.proc, c.regs, c.stack, 3); !slices.Equal(short, pcs[:3]) {
					t.Errorf("max 3: %#x, want %#x", short, pcs[:3])
				}
			}
		})
	}
}

// checkVariant makes sure the fixture is what the test claims.
func checkVariant(t *testing.T, exe string, v variant) {
	t.Helper()
	for _, path := range []string{exe, filepath.Join(filepath.Dir(exe), "libuwlib.so")} {
		f, err := elf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if hasHdr := f.Section(".eh_frame_hdr") != nil; hasHdr == v.noHdr {
			t.Fatalf("%s: has .eh_frame_hdr = %v", path, hasHdr)
		}
		if path == exe && (f.Type == elf.ET_EXEC) != v.nonPIE {
			t.Fatalf("%s: ELF type %v", path, f.Type)
		}
	}
}

// Without CFI, the frame-pointer walk BPF does loses frames: the point of
// the package.
func TestFramePointersAloneFail(t *testing.T) {
	exe := fixture(t, variants[0])
	c := runFixture(t, exe, 0)
	fp := names(c.proc, New().Unwind(nil, c.regs, c.stack, 64))
	t.Logf("frame-pointer walk: %v", fp)
	if want := expectedChain(0); len(fp) >= len(want) && slices.Equal(fp[:len(want)], want) {
		t.Fatalf("the frame-pointer walk found the whole chain; the fixture does not omit frame pointers")
	}
}

func TestUnwindDegenerate(t *testing.T) {
	exe := fixture(t, variants[0])
	c := runFixture(t, exe, 0)
	u := New()
	if pcs := u.Unwind(c.proc, c.regs, c.stack, 0); pcs != nil {
		t.Errorf("max 0: %#x", pcs)
	}
	if pcs := u.Unwind(c.proc, Regs{RSP: c.regs.RSP}, c.stack, 10); pcs != nil {
		t.Errorf("rip 0: %#x", pcs)
	}
	// No stack: just the pc.
	if pcs := u.Unwind(c.proc, c.regs, nil, 10); !slices.Equal(pcs, []uint64{c.regs.RIP}) {
		t.Errorf("empty stack: %#x", pcs)
	}
	// A truncated snapshot stops where the next return address is missing.
	full := u.Unwind(c.proc, c.regs, c.stack, 64)
	for cut := 0; cut <= len(c.stack); cut += 8 {
		pcs := u.Unwind(c.proc, c.regs, c.stack[:cut], 64)
		if len(pcs) == 0 || !slices.Equal(pcs, full[:len(pcs)]) {
			t.Fatalf("cut at %d: %#x is not a prefix of %#x", cut, pcs, full)
		}
	}
	// A pc outside every mapping, with a garbage rbp: one frame.
	if pcs := u.Unwind(c.proc, Regs{RIP: 0x10, RSP: c.regs.RSP, RBP: 1}, c.stack, 10); len(pcs) != 1 {
		t.Errorf("unmapped pc: %#x", pcs)
	}
}

// Code without CFI (JIT code, [vdso]) is unwound through rbp when it
// points into the snapshot, and the CFI walk resumes after it.
func TestFramePointerFallback(t *testing.T) {
	exe := fixture(t, variants[0])
	c := runFixture(t, exe, 0)
	u := New()
	full := u.Unwind(c.proc, c.regs, c.stack, 64)
	var anon, vdso uint64
	for _, m := range c.proc.Mappings() {
		switch {
		case m.Path == "[vdso]":
			vdso = m.Start + 0x10
		case !m.IsFile() && m.Contains(c.regs.RSP):
			anon = c.regs.RSP - 0x100 // in [stack]: no CFI there
		}
	}
	if anon == 0 {
		t.Fatal("no [stack] mapping")
	}
	// A frame below uw_capture's: rbp at rsp+48, [rbp] the real rbp,
	// [rbp+8] a return address whose call site is uw_capture's pc.
	const below = 64
	stack := append(make([]byte, below), c.stack...)
	regs := Regs{RSP: c.regs.RSP - below, RBP: c.regs.RSP - 16}
	putWord(stack, below-16, c.regs.RBP)
	putWord(stack, below-8, c.regs.RIP+1)
	for _, pc := range []uint64{anon, vdso} {
		if pc == 0 {
			continue
		}
		regs.RIP = pc
		got := u.Unwind(c.proc, regs, stack, 64)
		want := append([]uint64{pc, c.regs.RIP + 1}, full[1:]...)
		if !slices.Equal(got, want) {
			t.Errorf("from %#x: %v, want %v", pc, names(c.proc, got), names(c.proc, want))
		}
		// With rbp outside the snapshot, the walk stops.
		bad := regs
		bad.RBP = regs.RSP - 8
		if got := u.Unwind(c.proc, bad, stack, 64); len(got) != 1 {
			t.Errorf("from %#x with rbp below rsp: %#x", pc, got)
		}
	}
}

// The unwinder must agree with itself whichever way it finds FDEs.
func TestLookupPaths(t *testing.T) {
	paths := []string{fixture(t, variants[0]), fixture(t, variants[1])}
	if c := runFixture(t, paths[0], 0); c != nil {
		for _, o := range c.proc.Objects() {
			paths = append(paths, o.OpenPath(c.pid)) // libc, ld.so
		}
	}
	for _, path := range paths {
		fd, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := fd.Stat()
		load := func(opt loadOptions) *object {
			o, err := parseObject(fd, fi.Size(), opt)
			if err != nil {
				t.Fatalf("%s %+v: %v", path, opt, err)
			}
			return o
		}
		hdr := load(loadOptions{})
		idx := load(loadOptions{ignoreHdr: true})
		noSec := load(loadOptions{ignoreSections: true})
		noSecIdx := load(loadOptions{ignoreSections: true, ignoreHdr: true})
		fd.Close()
		if hdr.tblCount == 0 || idx.tblCount != 0 || noSec.tblCount == 0 || noSecIdx.tblCount != 0 {
			t.Fatalf("%s: table entries %d %d %d %d", path, hdr.tblCount, idx.tblCount, noSec.tblCount, noSecIdx.tblCount)
		}
		if len(idx.index) != hdr.tblCount {
			// Zero-length FDEs are left out of the index; the fixtures
			// have none.
			if path == paths[0] || path == paths[1] {
				t.Errorf("%s: index has %d FDEs, header table %d", path, len(idx.index), hdr.tblCount)
			}
			t.Logf("%s: index has %d FDEs, header table %d", path, len(idx.index), hdr.tblCount)
		}
		checked := 0
		for _, e := range idx.index {
			for _, pc := range []uint64{e.start, e.start + uint64(e.size)/2, e.start + uint64(e.size) - 1} {
				var fdes [4]fde
				for i, o := range []*object{hdr, idx, noSec, noSecIdx} {
					f, ok := o.find(pc)
					if !ok {
						t.Fatalf("%s: pc %#x: no FDE with lookup path %d", path, pc, i)
					}
					fdes[i] = f
				}
				for i := 1; i < 4; i++ {
					if fdes[i].start != fdes[0].start || fdes[i].end != fdes[0].end || fdes[i].insnsAddr != fdes[0].insnsAddr {
						t.Fatalf("%s: pc %#x: lookup path %d found [%#x,%#x), path 0 [%#x,%#x)",
							path, pc, i, fdes[i].start, fdes[i].end, fdes[0].start, fdes[0].end)
					}
				}
				if _, ok := computeRow(&fdes[0], pc, &hdr.bases); !ok {
					t.Errorf("%s: pc %#x: CFI not understood", path, pc)
				}
				checked++
			}
		}
		t.Logf("%s: %d FDEs, %d pcs checked", filepath.Base(path), len(idx.index), checked)
	}
}

// Every row of every FDE in libc and the fixtures must be understood: the
// instructions gcc, clang and binutils emit are all implemented.
func TestAllRowsUnderstood(t *testing.T) {
	exe := fixture(t, variants[0])
	c := runFixture(t, exe, 0)
	for _, o := range c.proc.Objects() {
		fd, err := os.Open(o.OpenPath(c.pid))
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := fd.Stat()
		obj, err := parseObject(fd, fi.Size(), loadOptions{ignoreHdr: true})
		fd.Close()
		if err != nil {
			t.Fatalf("%s: %v", o.Path, err)
		}
		bad := 0
		for _, e := range obj.index {
			f, ok := obj.find(e.start)
			if !ok {
				t.Fatalf("%s: FDE at %#x not found", o.Path, e.start)
			}
			for pc := f.start; pc < f.end; pc++ {
				if _, ok := computeRow(&f, pc, &obj.bases); !ok {
					bad++
					if bad < 5 {
						t.Errorf("%s: pc %#x in FDE [%#x,%#x): CFI not understood", o.Path, pc, f.start, f.end)
					}
					break
				}
			}
		}
		t.Logf("%s: %d FDEs", filepath.Base(o.Path), len(obj.index))
	}
}

func TestConcurrent(t *testing.T) {
	exe := fixture(t, variants[0])
	c := runFixture(t, exe, 2)
	u := New()
	want := u.Unwind(c.proc, c.regs, c.stack, 64)
	u = New() // cold again: the goroutines race to load the CFI
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				if got := u.Unwind(c.proc, c.regs, c.stack, 64); !slices.Equal(got, want) {
					t.Errorf("concurrent unwind: %#x, want %#x", got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// The cache is keyed by build-id and bounded.
func TestCache(t *testing.T) {
	exe := fixture(t, variants[0])
	c := runFixture(t, exe, 0)
	u := New()
	u.Unwind(c.proc, c.regs, c.stack, 64)
	n := u.lru.Len()
	if n < 3 { // chain, libuwlib.so, libc
		t.Fatalf("%d objects cached", n)
	}
	// A second process of the same program shares them.
	c2 := runFixture(t, exe, 1)
	u.Unwind(c2.proc, c2.regs, c2.stack, 64)
	if u.lru.Len() != n {
		t.Errorf("second process: %d objects cached, was %d", u.lru.Len(), n)
	}
	u = New()
	u.max = 1
	pcs := u.Unwind(c.proc, c.regs, c.stack, 64)
	if got := names(c.proc, pcs); got[len(got)-1] != "_start" {
		t.Errorf("max 1: unwound %v", got)
	}
	if u.lru.Len() != 1 {
		t.Errorf("max 1: %d objects cached", u.lru.Len())
	}
}

// Garbage must never make Unwind panic or loop: random stacks, random
// registers, stacks made of pointers into code and into the stack itself.
func TestGarbage(t *testing.T) {
	exe := fixture(t, variants[0])
	c := runFixture(t, exe, 0)
	old := recoverPanics
	recoverPanics = false
	defer func() { recoverPanics = old }()
	u := New()
	var code []objfile.Mapping
	for _, m := range c.proc.Mappings() {
		if m.Exec() {
			code = append(code, m)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		stack := make([]byte, rng.IntN(len(c.stack)+1))
		regs := c.regs
		switch i % 4 {
		case 0: // random bytes
			for j := range stack {
				stack[j] = byte(rng.Uint32())
			}
		case 1: // words pointing into code and into the stack
			copy(stack, c.stack)
			for j := 0; j+8 <= len(stack); j += 8 {
				var w uint64
				switch rng.IntN(3) {
				case 0:
					m := code[rng.IntN(len(code))]
					w = m.Start + rng.Uint64N(m.End-m.Start)
				case 1:
					w = regs.RSP + rng.Uint64N(uint64(len(stack))+64)
				default:
					w = rng.Uint64()
				}
				putWord(stack, j, w)
			}
		case 2: // the real stack with a few words flipped
			copy(stack, c.stack)
			for range 4 {
				if len(stack) >= 8 {
					putWord(stack, rng.IntN(len(stack)-7), rng.Uint64())
				}
			}
		case 3: // the real stack, random registers
			copy(stack, c.stack)
			regs.RBP = regs.RSP + rng.Uint64N(uint64(len(stack))+16)
			if rng.IntN(2) == 0 {
				regs.RSP = rng.Uint64()
			}
		}
		if rng.IntN(2) == 0 {
			m := code[rng.IntN(len(code))]
			regs.RIP = m.Start + rng.Uint64N(m.End-m.Start)
		} else if rng.IntN(4) == 0 {
			regs.RIP = rng.Uint64()
		}
		max := 1 + rng.IntN(100)
		if pcs := u.Unwind(c.proc, regs, stack, max); len(pcs) > max {
			t.Fatalf("%d frames for max %d", len(pcs), max)
		}
	}
}

func putWord(b []byte, at int, w uint64) {
	for k := range 8 {
		b[at+k] = byte(w >> (8 * k))
	}
}

func FuzzUnwind(f *testing.F) {
	exe := fixture(f, variants[0])
	c := runFixture(f, exe, 1)
	var code []objfile.Mapping
	for _, m := range c.proc.Mappings() {
		if m.Exec() {
			code = append(code, m)
		}
	}
	u := New()
	f.Add(c.stack, uint64(0), c.regs.RBP-c.regs.RSP, false)
	f.Add(c.stack, uint64(12345), uint64(16), false)
	f.Add(c.stack[:100], uint64(1), uint64(0), false)
	f.Add([]byte{}, c.regs.RIP, uint64(0), true)
	f.Add(c.stack[len(c.stack)/2:], c.regs.RIP, uint64(8), true)
	f.Fuzz(func(t *testing.T, stack []byte, pc, rbpOff uint64, rawPC bool) {
		old := recoverPanics
		recoverPanics = false
		defer func() { recoverPanics = old }()
		regs := Regs{RIP: pc, RSP: c.regs.RSP, RBP: c.regs.RSP + rbpOff}
		if !rawPC { // a pc in code, where there is CFI to misapply
			m := code[pc%uint64(len(code))]
			regs.RIP = m.Start + (pc/uint64(len(code)))%(m.End-m.Start)
		}
		if pcs := u.Unwind(c.proc, regs, stack, 128); len(pcs) > 128 {
			t.Fatalf("%d frames", len(pcs))
		}
	})
}

func BenchmarkUnwind(b *testing.B) {
	exe := fixture(b, variants[0])
	c := runFixture(b, exe, 0)
	u := New()
	const depth = 10
	pcs := u.Unwind(c.proc, c.regs, c.stack, depth) // warm the cache
	if len(pcs) != depth {
		b.Fatalf("%d frames, want %d: %v", len(pcs), depth, names(c.proc, pcs))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		u.Unwind(c.proc, c.regs, c.stack, depth)
	}
	b.ReportMetric(float64(depth)*float64(b.N)/b.Elapsed().Seconds(), "frames/s")
}
