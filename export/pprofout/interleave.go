package pprofout

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// Python frames take the place of the interpreter's evaluation frames, as
// py-spy --native lays them out: each activation of the evaluation loop
// (_PyEval_EvalFrameDefault, PyEval_EvalFrameEx) ran a run of Python
// frames, which replace it. Up to Python 3.10 each Python call has an
// activation of its own. From 3.11 one activation runs a Python function
// and the Python functions it calls, until one is called through C (the
// "entry" frames py-spy reads from the interpreter). The stack walkers
// mark each frame entered from C (model.PyKey.Entry) where they can tell;
// where they cannot (older recordings, a walk cut short), the runs are
// derived from what is known: one Python frame per activation when there
// are as many as frames, all of them when a whole stack has one
// activation, and the call sites so decided, applied to other stacks of
// the process. A stack whose
// runs stay unknown keeps its Python frames above the native ones, as
// profiles had them before, and is counted.

// isEvalFrame reports whether a native function is the interpreter's
// evaluation loop, by py-spy's test: its name split at '_' and '.'
// starts PyEval, EvalFrameDefault or EvalFrameEx (also
// "_PyEval_EvalFrameDefault.cold").
func isEvalFrame(fn string) bool {
	t := strings.FieldsFunc(fn, func(r rune) bool { return r == '_' || r == '.' })
	return len(t) >= 2 && t[0] == "PyEval" && (t[1] == "EvalFrameDefault" || t[1] == "EvalFrameEx")
}

// pythonVersionRx finds the version in an interpreter's file name:
// python3.10, libpython3.12.so.1.0, python2.7.
var pythonVersionRx = regexp.MustCompile(`python(\d+)\.(\d+)`)

// oneFramePerActivation reports whether the interpreter in object is a
// Python before 3.11, which runs every Python frame in an activation of
// its own.
func oneFramePerActivation(object string) bool {
	m := pythonVersionRx.FindStringSubmatch(object)
	if m == nil {
		return false
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return major < 3 || major == 3 && minor <= 10
}

// rootFunctions end a complete native stack: the process's and the
// threads' first functions. A stack ending elsewhere was cut short (its
// unwinding stopped, or MaxStack frames were kept) and may have more
// activations beyond.
var rootFunctions = map[string]bool{"_start": true, "__libc_start_main": true, "__libc_start_call_main": true,
	"clone": true, "clone3": true, "__clone": true, "__clone3": true, "start_thread": true}

// activation is a run of evaluation frames, native[first..last], and the
// Python frames it ran, py[py0:py1].
type activation struct {
	first, last int
	py0, py1    int
}

// boundary is what is known of the call between a Python frame and its
// caller: whether the callee was entered through C (it is the outermost
// frame of its activation) or ran in its caller's activation.
type boundary uint8

const (
	callUnknown boundary = iota
	callEntry
	callInline
	callConflict // learnt both ways: not used
)

// callSite keys what a call site is learnt to do: the caller's code and
// instruction and the callee's code, in one process.
type callSite struct {
	pid                     uint32
	callerCode, callerInstr uint64
	calleeCode              uint64
}

// outcome says how a stack's Python frames were laid out.
type outcome uint8

const (
	noPython    outcome = iota // no Python frames, or no native ones
	interleaved                // from the stack itself
	learnt                     // with call sites decided in other stacks
	noEval                     // no evaluation frame among the native frames
	unmatched                  // the runs could not be decided
)

// layout is the decided form of one (native, Python) stack pair.
type layout struct {
	acts []activation // nil: Python frames above the native ones
	rest int          // Python frames from here on go above the native ones
	how  outcome
}

// interleaver decides layouts, learning call sites from the stacks it
// decides from their own evidence.
type interleaver struct {
	names *model.Names
	sites map[callSite]boundary
}

func newInterleaver(n *model.Names) *interleaver {
	return &interleaver{names: n, sites: map[callSite]boundary{}}
}

// activations finds the evaluation activations of a native stack, whether
// the stack is complete, and whether its interpreter runs one Python frame
// per activation.
func (in *interleaver) activations(pid uint32, native []uint64) (acts []activation, complete, onePer bool) {
	prevEval := false
	for i, addr := range native {
		fn, object, ok := splitFrame(in.names.Frame(pid, addr))
		eval := ok && isEvalFrame(fn)
		switch {
		case eval && prevEval:
			acts[len(acts)-1].last = i
		case eval:
			acts = append(acts, activation{first: i, last: i})
			onePer = onePer || oneFramePerActivation(object)
		}
		prevEval = eval
		if i == len(native)-1 {
			complete = ok && rootFunctions[fn]
		}
	}
	return acts, complete, onePer
}

func (in *interleaver) site(pid uint32, py []model.PyKey, i int) callSite {
	return callSite{pid: pid, callerCode: py[i+1].Code, callerInstr: py[i+1].Instr, calleeCode: py[i].Code}
}

// decide lays out one stack pair; with useSites it applies the call sites
// learnt so far. A layout decided from the stack alone teaches its call
// sites.
func (in *interleaver) decide(pid uint32, native []uint64, py []model.PyKey, useSites bool) layout {
	if len(py) == 0 || len(native) == 0 {
		return layout{how: noPython}
	}
	acts, nativeComplete, onePer := in.activations(pid, native)
	if len(acts) == 0 {
		return layout{how: noEval}
	}
	e, p := len(acts), len(py)
	pyComplete := p < event.MaxPy // a full Python stack may have lost its outermost frames
	b := make([]boundary, p-1)
	usedSites := false
	for i := range b {
		// The walkers mark the frames entered from C (3.11+): py[i] is
		// then the outermost frame of its activation.
		if entry, known := py[i].Entry(); known {
			b[i] = callInline
			if entry {
				b[i] = callEntry
			}
			continue
		}
		switch {
		case onePer:
			b[i] = callEntry
		case useSites:
			if s := in.sites[in.site(pid, py, i)]; s == callEntry || s == callInline {
				b[i], usedSites = s, true
			}
		}
	}
	if !force(b, e, pyComplete, nativeComplete) {
		return layout{how: unmatched}
	}
	// Walk the Python frames from the innermost, starting the next
	// activation's run after each entry.
	a, rest := 0, p
walk:
	for i := range p {
		acts[a].py1 = i + 1
		if i == p-1 {
			break
		}
		switch b[i] {
		case callUnknown:
			return layout{how: unmatched}
		case callEntry:
			if a+1 == e {
				// The rest ran in activations beyond the cut (force
				// made sure the native stack has one).
				rest = i + 1
				break walk
			}
			a++
			acts[a].py0 = i + 1
		}
	}
	if a+1 < e && pyComplete {
		return layout{how: unmatched} // an activation without a frame
	}
	for j := a + 1; j < e; j++ {
		acts[j].py0, acts[j].py1 = p, p // ran frames the Python stack lost: stays as it is
	}
	how := interleaved
	if usedSites {
		how = learnt
	} else {
		for i, x := range b {
			in.learn(in.site(pid, py, i), x)
		}
	}
	return layout{acts: acts, rest: rest, how: how}
}

// force decides the calls the counts decide, and reports false when the
// known ones contradict them. Each activation runs at least one frame, in
// runs from the innermost: with the whole Python stack, every visible
// activation but the innermost starts at an entry (at least e-1 entries
// among the p-1 calls); with the whole native stack there is no activation
// beyond the visible ones (at most e-1). So as many activations as frames
// give one frame each, and one activation in a whole native stack runs
// all of them.
func force(b []boundary, e int, pyComplete, nativeComplete bool) bool {
	entries, unknowns := 0, 0
	for _, x := range b {
		switch x {
		case callEntry:
			entries++
		case callUnknown:
			unknowns++
		}
	}
	lo, hi := 0, len(b)
	if pyComplete {
		lo = e - 1
	}
	if nativeComplete {
		hi = min(hi, e-1)
	}
	if entries > hi || entries+unknowns < lo {
		return false
	}
	fill := callUnknown
	switch {
	case entries == hi:
		fill = callInline
	case entries+unknowns == lo:
		fill = callEntry
	}
	for i := range b {
		if b[i] == callUnknown {
			b[i] = fill
		}
	}
	return true
}

func (in *interleaver) learn(s callSite, x boundary) {
	switch old := in.sites[s]; {
	case x != callEntry && x != callInline:
	case old == callUnknown:
		in.sites[s] = x
	case old != x:
		in.sites[s] = callConflict
	}
}
