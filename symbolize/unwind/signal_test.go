package unwind

import (
	"debug/elf"
	"slices"
	"testing"
)

// A signal handler's stack: the unwinder must go through glibc's signal
// trampoline (CFI "zRS" with DW_CFA_expression rules that load every
// register from the ucontext) to the interrupted function, and look that
// one up at its exact pc.
func TestSignalFrame(t *testing.T) {
	for _, v := range variants[:2] {
		t.Run(v.name, func(t *testing.T) {
			c := runFixture(t, fixture(t, v), 1, "signal")
			pcs := New().Unwind(c.proc, c.regs, c.stack, 64)
			got := names(c.proc, pcs)
			t.Logf("%d bytes of stack, frames %v", len(c.stack), got)
			if len(got) < 4 || got[0] != "uw_capture" || got[1] != "uw_handler" {
				t.Fatalf("unwound %v, want uw_capture, uw_handler, the trampoline, uw_fault, ...", got)
			}
			if pcs[3] != c.faultPC {
				t.Errorf("interrupted pc %#x, want the faulting pc %#x", pcs[3], c.faultPC)
			}
			want := append([]string{"uw_fault"}, expectedChain(1)[1:]...)
			if rest := got[3:]; len(rest) < len(want) || !slices.Equal(rest[:len(want)], want) {
				t.Errorf("after the trampoline: %v, want %v", rest, want)
			}
			if got[len(got)-1] != "_start" {
				t.Errorf("outermost frame %q, want _start", got[len(got)-1])
			}
		})
	}
}

// PLT entries have CFI whose CFA is an expression of rip: rsp+8 until the
// lazy-binding entry pushes its relocation index, then rsp+16.
func TestPLT(t *testing.T) {
	for _, v := range []variant{variants[0], variants[3]} {
		t.Run(v.name, func(t *testing.T) {
			exe := fixture(t, v)
			c := runFixture(t, exe, 0)
			ef, err := elf.Open(exe)
			if err != nil {
				t.Fatal(err)
			}
			defer ef.Close()
			plt := ef.Section(".plt")
			if plt == nil || plt.Size < 32 {
				t.Fatalf("no .plt in %s", exe)
			}
			var bias, mainAddr uint64
			for _, o := range c.proc.Objects() {
				if o.Path != exe {
					continue
				}
				f, err := c.proc.File(o.Mappings[0])
				if err != nil {
					t.Fatal(err)
				}
				bias, _ = o.Bias(f)
				sym, ok := f.Lookup("main")
				if !ok {
					t.Fatal("no main")
				}
				mainAddr = bias + sym.Value
			}
			if mainAddr == 0 {
				t.Fatalf("%s not mapped", exe)
			}
			// Lazy PLT entries: jmp *GOT(6); push idx(5); jmp PLT0. With IBT:
			// endbr64(4); push idx(5); bnd jmp PLT0.
			pushed := uint64(11)
			if v.name == "ibt" {
				pushed = 9
			}
			raA, raB, raC := mainAddr+1, mainAddr+2, mainAddr+3
			stack := make([]byte, 24)
			putWord(stack, 0, raA)
			putWord(stack, 8, raB)
			putWord(stack, 16, raC)
			const sp = 0x7ff000000000
			u := New()
			for entry := uint64(0); entry < plt.Size/16; entry++ {
				for off := range uint64(16) {
					pc := bias + plt.Addr + 16*entry + off
					want := raA
					switch {
					case entry == 0 && off < 6: // PLT0: push GOT+8; jmp *GOT+16
						want = raB
					case entry == 0:
						want = raC
					case off >= pushed:
						want = raB
					}
					pcs := u.Unwind(c.proc, Regs{RIP: pc, RSP: sp, RBP: 1}, stack, 2)
					if len(pcs) != 2 || pcs[1] != want {
						t.Fatalf("PLT entry %d +%d: unwound %#x, want return address %#x", entry, off, pcs, want)
					}
				}
			}
		})
	}
}
