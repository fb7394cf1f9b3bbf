// Package describe turns model values into the names every exporter shows,
// so a kernel, a stack frame or the drop counters read the same in a trace,
// a profile and the text report.
package describe

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cudatap/cudatap/symbolize"
	"github.com/cudatap/cudatap/tracer/model"
)

// KernelNameMax bounds display names: templated kernels demangle to
// kilobytes, which no track or flame graph can show.
const KernelNameMax = 120

// Kernel names the kernel whose host stub is at addr. Mangled is the symbol
// as found, Full its demangled form and Display a shortened Full; all three
// are "kernel@0x<addr>" when the stub was never resolved.
type Kernel struct {
	Display, Full, Mangled string
}

// KernelAt names the kernel with host stub addr in p.
func KernelAt(p *model.Process, addr uint64) Kernel {
	mangled, ok := p.Kernels[addr]
	if !ok || mangled == "" {
		n := "kernel@0x" + strconv.FormatUint(addr, 16)
		return Kernel{Display: n, Full: n, Mangled: n}
	}
	full := symbolize.Demangle(mangled)
	return Kernel{Display: symbolize.Shorten(full, KernelNameMax), Full: full, Mangled: mangled}
}

// Frame names a captured stack address: "function (object)" as resolved
// while the process lived, else the raw address.
func Frame(p *model.Process, addr uint64) string {
	if s, ok := p.Frames[addr]; ok && s != "" {
		return s
	}
	return "0x" + strconv.FormatUint(addr, 16)
}

// isSelf reports whether frame f names the function c called: the exact
// symbol or the plain API name followed by a non-identifier byte (" (lib)",
// "@@VER", "+0x10").
func isSelf(f string, c *model.Call) bool {
	for _, name := range [2]string{c.SymbolName(), c.API.String()} {
		if strings.HasPrefix(f, name) && (len(f) == len(name) || !isIdent(f[len(name)])) {
			return true
		}
	}
	return false
}

func isIdent(b byte) bool {
	return b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// Drops is the one-line loss account every output carries, also when all
// zero: a trace that silently lost calls would answer questions wrongly.
func Drops(d model.Drops) string {
	var b strings.Builder
	fmt.Fprintf(&b, "dropped events: %d (ring buffer full %d, entry table full %d, decode errors %d",
		d.Lost(), d.RingbufFull, d.InflightFull, d.DecodeErrors)
	// Only a corrupt or newer recording names unknown APIs; shown when it
	// happens so that the parts always add up to the total.
	if d.UnknownAPI != 0 {
		fmt.Fprintf(&b, ", unknown API %d", d.UnknownAPI)
	}
	// The kernel skips a BPF program when another runs on the same CPU;
	// shown when it happened, so the parts add up.
	if d.ProgramSkips != 0 {
		fmt.Fprintf(&b, ", programs skipped by the kernel %d", d.ProgramSkips)
	}
	fmt.Fprintf(&b, "); returns without their entry: %d; argument read faults: %d; attach failures: %d",
		d.OrphanReturns, d.ReadFaults, d.AttachFailures)
	return b.String()
}

// PyStack names the Python frames of c's stack, innermost first ("file:line
// function"), or nil when none were captured.
func PyStack(p *model.Process, c *model.Call) []string {
	if c.PyStack < 0 || int(c.PyStack) >= len(p.PyStacks) {
		return nil
	}
	keys := p.PyStacks[c.PyStack]
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		name := p.PyFrames[k]
		if name == "" {
			name = fmt.Sprintf("<python code 0x%x>", k.Code)
		}
		out = append(out, name)
	}
	return out
}

// NativeStack names the frames of c's native stack that lie outside the
// probed function, innermost first, at most max.
func NativeStack(p *model.Process, c *model.Call, max int) []string {
	if c.Stack < 0 || int(c.Stack) >= len(p.Stacks) {
		return nil
	}
	var out []string
	for _, addr := range p.Stacks[c.Stack] {
		f := Frame(p, addr)
		if len(out) == 0 && isSelf(f, c) {
			continue
		}
		out = append(out, f)
		if len(out) == max {
			break
		}
	}
	return out
}
