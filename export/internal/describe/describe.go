// Package describe turns model values and the name tables into the names
// every exporter shows, so a kernel, a stack frame or the drop counters read
// the same in a trace, a profile and the text report.
package describe

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cudatap/cudatap/symbolize"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// KernelNameMax bounds display names: templated kernels demangle to
// kilobytes, which no track or flame graph can show.
const KernelNameMax = 120

// Kernel names a launched kernel. Mangled is the symbol as found, Full its
// demangled form and Display a shortened Full; all three are
// "kernel@0x<func>" when the kernel was never named.
type Kernel struct {
	Display, Full, Mangled string
}

// KernelOf names the kernel launched as f in p: by the name a load-time
// call gave it, else by the ELF symbol at its host stub as n resolved it.
func KernelOf(n *model.Names, p *model.Process, f uint64) Kernel {
	mangled := mangledOf(n, p, f)
	if mangled == "" {
		s := "kernel@0x" + strconv.FormatUint(f, 16)
		return Kernel{Display: s, Full: s, Mangled: s}
	}
	full := symbolize.Demangle(mangled)
	return Kernel{Display: symbolize.Shorten(full, KernelNameMax), Full: full, Mangled: mangled}
}

// Named reports whether k is more than the address it was launched as.
func (k Kernel) Named() bool {
	return k.Mangled != k.Full || !strings.HasPrefix(k.Full, "kernel@0x")
}

// KernelNamed reports whether the kernel launched as f in p has a name
// yet (KernelOf gives more than its address).
func KernelNamed(n *model.Names, p *model.Process, f uint64) bool {
	return mangledOf(n, p, f) != ""
}

// mangledOf is the symbol KernelOf names f by, "" when none is known.
func mangledOf(n *model.Names, p *model.Process, f uint64) string {
	mangled, addr := p.KernelSymbol(f)
	if mangled == "" && n != nil {
		mangled = n.Kernel(p.PID, addr)
	}
	if mangled == "" {
		mangled = p.MeasuredNames[f] // CUPTI's name (--gpu-times)
	}
	return mangled
}

// Frame names a captured stack address of pid: "function (object)" as
// resolved while the process lived, else the raw address.
func Frame(n *model.Names, pid uint32, addr uint64) string {
	if n != nil {
		if s := n.Frame(pid, addr); s != "" {
			return s
		}
	}
	return "0x" + strconv.FormatUint(addr, 16)
}

// PyFrame names a Python frame of pid: "file:line function", else its code
// object's address.
func PyFrame(n *model.Names, pid uint32, k model.PyKey) string {
	if n != nil {
		if s := n.PyFrame(pid, k); s != "" {
			return s
		}
	}
	return fmt.Sprintf("<python code 0x%x>", k.Code)
}

// PyStack names the frames of p's Python stack idx, innermost first, or
// nil when there is none (idx < 0).
func PyStack(n *model.Names, p *model.Process, idx int32) []string {
	if idx < 0 || int(idx) >= len(p.PyStacks) {
		return nil
	}
	keys := p.PyStacks[idx]
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, PyFrame(n, p.PID, k))
	}
	return out
}

// NativeStack names the frames of p's native stack idx that lie outside the
// probed function (symbol of api), innermost first, at most max.
func NativeStack(n *model.Names, p *model.Process, idx int32, api event.API, symbol uint8, max int) []string {
	if idx < 0 || int(idx) >= len(p.Stacks) {
		return nil
	}
	self := [2]string{api.String(), api.String()}
	if s := event.Lookup(api); s != nil {
		self[0] = s.Symbol(int(symbol))
	}
	var out []string
	for _, addr := range p.Stacks[idx] {
		f := Frame(n, p.PID, addr)
		if len(out) == 0 && isSelf(f, self) {
			continue
		}
		out = append(out, f)
		if len(out) == max {
			break
		}
	}
	return out
}

// isSelf reports whether frame f names the probed function: its exact
// symbol or the plain API name followed by a non-identifier byte (" (lib)",
// "@@VER", "+0x10").
func isSelf(f string, names [2]string) bool {
	for _, name := range names {
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
	// Not losses, but limits that acted: shown when they did.
	if d.WindowFull != 0 {
		fmt.Fprintf(&b, ", %d GPU ops laid out early (window full)", d.WindowFull)
	}
	if d.StacksDropped != 0 {
		fmt.Fprintf(&b, ", %d stacks not kept", d.StacksDropped)
	}
	if d.PyCodeLost != 0 {
		fmt.Fprintf(&b, ", %d Python code objects not copied (ring buffer full)", d.PyCodeLost)
	}
	// GPU times (--gpu-times): ops drawn within bounds instead.
	if n := d.GPUTimesLost + d.GPUTimesUnmatched + d.GPUTimesLate; n != 0 {
		fmt.Fprintf(&b, "; GPU times lost %d (not delivered or not joined %d, matching no traced call %d, too late %d)",
			n, d.GPUTimesLost, d.GPUTimesUnmatched, d.GPUTimesLate)
	}
	if d.GPUTimesUnmeasured != 0 {
		fmt.Fprintf(&b, "; %d GPU ops not measured (bounded instead)", d.GPUTimesUnmeasured)
	}
	if d.GPUOpsCUPTIOnly != 0 {
		fmt.Fprintf(&b, "; %d GPU ops seen by CUPTI only (no traced call enqueued them)", d.GPUOpsCUPTIOnly)
	}
	// A recording from elsewhere can hold any number of processes,
	// threads, streams...: what the model's bounds merged.
	if d.Limits.Any() {
		fmt.Fprintf(&b, "; limits: %s", d.Limits.Describe())
	}
	return b.String()
}

// Account is the loss account of a result: its drop line, after a warning
// when the recording was cut short (the counters then cover only what was
// read, and the run's own are unknown).
func Account(r *model.Result) string {
	if r.Truncated == "" {
		return Drops(r.Drops)
	}
	return "recording truncated (" + r.Truncated + "): the drop counters of the whole run are unknown; " + Drops(r.Drops)
}

// SplitPyFrame takes PyFrame's "file:line function" apart. The function
// is after the last space (a file path may hold spaces; a function name
// does not).
func SplitPyFrame(s string) (file string, line int, fn string) {
	sp := strings.LastIndexByte(s, ' ')
	if sp < 0 {
		return "", 0, ""
	}
	loc, fn := s[:sp], s[sp+1:]
	colon := strings.LastIndexByte(loc, ':')
	if colon < 0 {
		return loc, 0, fn
	}
	line, _ = strconv.Atoi(loc[colon+1:])
	return loc[:colon], line, fn
}

// Kernels names kernels as KernelOf does, demangling each once per
// function rather than per launch. Its memory is bounded: past maxKernels
// names it starts afresh (a recording can name any number of kernels).
type Kernels struct {
	names *model.Names
	made  map[kernelKey]Kernel
}

// kernelKey identifies a kernel: the same function handle names different
// code in another process.
type kernelKey struct {
	pid uint32
	f   uint64
}

// maxKernels bounds the kernels whose names a Kernels keeps made.
const maxKernels = 1 << 14

// NewKernels names kernels from n (nil: by address only).
func NewKernels(n *model.Names) *Kernels {
	return &Kernels{names: n, made: map[kernelKey]Kernel{}}
}

// Of names the kernel launched as f in p.
func (c *Kernels) Of(p *model.Process, f uint64) Kernel {
	key := kernelKey{p.PID, f}
	k, ok := c.made[key]
	// A kernel unnamed when its launch was written may be named by the
	// time its GPU op is: CUPTI's name comes with the op's measurement,
	// and a live trace's names as the resolver finds them.
	if !ok || (!k.Named() && KernelNamed(c.names, p, f)) {
		k = KernelOf(c.names, p, f)
		if len(c.made) >= maxKernels {
			clear(c.made)
		}
		c.made[key] = k
	}
	return k
}
