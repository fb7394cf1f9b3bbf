// Package unwind walks native user stacks of x86-64 processes from a
// snapshot taken in BPF: the registers rip, rsp and rbp and a copy of the
// stack from rsp upwards.
//
// Code built without frame pointers (CPython, PyTorch, most distribution
// libraries) defeats the kernel's frame-pointer walk after a frame or two.
// The .eh_frame call frame information (CFI) that compilers emit for
// exception handling describes, for every instruction, where the caller's
// stack pointer (the CFA), return address and frame pointer are; the
// [Unwinder] interprets it against the stack snapshot, in user space.
//
// The CFI of an object is read once (by build-id) and shared by every
// process that maps it. Lookups use .eh_frame_hdr's binary search table
// when there is one, and otherwise an index of the FDEs built on first use.
// Where no CFI covers a pc (JIT code, [vdso], objects without .eh_frame),
// the unwinder follows the rbp chain if rbp points into the snapshot.
//
// Typical use, for an event carrying a stack copy:
//
//	pcs := u.Unwind(proc, unwind.Regs(ev.Regs), ev.Copy, 64) // ev: a tracer/event.Event
//	for i, pc := range pcs {
//		if i > 0 {
//			pc-- // a return address: name the call
//		}
//		frame := proc.Symbolize(pc)
//		...
//	}
package unwind

import (
	"container/list"
	"errors"
	"os"
	"slices"
	"sync"

	"github.com/cudatap/cudatap/internal/objfile"
	"github.com/cudatap/cudatap/symbolize"
)

// Regs are the user registers at the point the stack was copied.
type Regs struct {
	RIP, RSP, RBP uint64
}

// defaultMaxObjects bounds the number of objects whose CFI is cached.
const defaultMaxObjects = 512

// Unwinder unwinds stack snapshots. It caches the parsed CFI of object
// files, keyed by GNU build-id (or by the [objfile.File] for files
// without one), and is safe for concurrent use.
type Unwinder struct {
	mu    sync.Mutex
	max   int
	lru   list.List // of *entry; front is most recently used
	byKey map[objectKey]*list.Element
}

// objectKey identifies an object file: by build-id, or if it has none, by
// the File the symbolize package opened.
type objectKey struct {
	buildID string
	file    *objfile.File
}

// entry is the CFI of one object file, loaded once.
type entry struct {
	key  objectKey
	once sync.Once
	obj  *object // nil if the file has no usable CFI
	err  error
}

// New returns an Unwinder with an empty cache.
func New() *Unwinder {
	return &Unwinder{max: defaultMaxObjects, byKey: make(map[objectKey]*list.Element)}
}

// recoverPanics makes Unwind return the frames found so far should a bug
// make it panic; the fuzz test turns it off to see such bugs.
var recoverPanics = true

// Unwind returns return addresses innermost first (Regs.RIP first), at
// most max frames. stack holds the bytes of the target's stack starting
// at address regs.RSP.
//
// The first address is regs.RIP itself; the others are return addresses,
// which point after their call instruction: symbolize them as addr-1.
// Unwinding stops without error when a frame's CFA or return address lies
// outside the snapshot, at an address with neither CFI nor a usable frame
// pointer, at the outermost frame (whose CFI leaves the return address
// undefined), at a return address of 0, or at CFI it cannot interpret.
// Garbage input yields garbage addresses, never a panic.
//
// Addresses are mapped to objects with p's current mappings; call
// p.Refresh after the target loads libraries. p may be nil: then only the
// frame-pointer chain is followed.
func (u *Unwinder) Unwind(p *symbolize.Process, regs Regs, stack []byte, max int) (pcs []uint64) {
	if max <= 0 || regs.RIP == 0 {
		return nil
	}
	if recoverPanics {
		defer func() {
			if recover() != nil {
				pcs = slices.Clip(pcs)
			}
		}()
	}
	w := walker{u: u, p: p, snap: newSnapshot(regs.RSP, stack)}
	if p != nil {
		w.maps = p.Mappings()
	}
	f := frame{pc: regs.RIP, sp: regs.RSP, fp: regs.RBP, fpOK: true}
	exact := true // the pc of the first frame is not a return address
	pcs = make([]uint64, 0, min(max, 64))
	for {
		pcs = append(pcs, f.pc)
		if len(pcs) >= max {
			return pcs
		}
		next, nextExact, ok := w.step(f, exact)
		if !ok || next.pc == 0 {
			return pcs
		}
		f, exact = next, nextExact
	}
}

// walker is the state of one Unwind call.
type walker struct {
	u    *Unwinder
	p    *symbolize.Process
	maps []objfile.Mapping
	snap snapshot

	// The mapping of the previous lookup, its file and CFI.
	last     objfile.Mapping
	lastFile *objfile.File
	lastObj  *object
}

// step unwinds one frame. exact says f.pc is the address of the
// instruction being executed (the first frame, or the frame interrupted by
// a signal) rather than a return address.
func (w *walker) step(f frame, exact bool) (next frame, nextExact bool, ok bool) {
	lookup := f.pc
	if !exact {
		lookup-- // the call instruction: a call may end its function
	}
	if file, obj := w.object(lookup); obj != nil {
		m := w.last
		if vaddr, ok := file.VAddr(m.FileOffset(lookup)); ok {
			if fd, ok := obj.find(vaddr); ok {
				return w.cfiStep(f, &fd, vaddr, &obj.bases)
			}
		}
	}
	return w.fpStep(f)
}

// object returns the file mapped at pc and its CFI, nil if none.
func (w *walker) object(pc uint64) (*objfile.File, *object) {
	if w.last.Contains(pc) {
		return w.lastFile, w.lastObj
	}
	w.last, w.lastFile, w.lastObj = objfile.Mapping{}, nil, nil
	i, _ := slices.BinarySearchFunc(w.maps, pc, func(m objfile.Mapping, pc uint64) int {
		if m.Start <= pc {
			return -1
		}
		return 1
	})
	if i == 0 || !w.maps[i-1].Contains(pc) {
		return nil, nil
	}
	m := w.maps[i-1]
	w.last = m
	if !m.IsFile() {
		return nil, nil
	}
	file, err := w.p.File(m)
	if err != nil {
		return nil, nil
	}
	w.lastFile, w.lastObj = file, w.u.object(w.p, m, file)
	return w.lastFile, w.lastObj
}

// cfiStep unwinds f with the CFI row of the FDE fd for vaddr.
func (w *walker) cfiStep(f frame, fd *fde, vaddr uint64, b *bases) (next frame, nextExact bool, ok bool) {
	rw, ok := computeRow(fd, vaddr, b)
	if !ok {
		return next, false, false
	}
	var cfa uint64
	if rw.cfaExpr != nil {
		if cfa, ok = evalExpr(rw.cfaExpr, nil, &f, &w.snap); !ok {
			return next, false, false
		}
	} else {
		base, ok := f.reg(rw.cfaReg)
		if !ok {
			return next, false, false
		}
		cfa = base + uint64(rw.cfaOff)
	}

	ra := rw.regs[slotRA]
	if ra.kind == ruleUndefined || ra.kind == ruleUnset || ra.kind == ruleSame {
		// Undefined marks the outermost frame (_start, clone); the others
		// would loop.
		return next, false, false
	}
	if next.pc, ok = w.recover(ra, cfa, &f); !ok {
		return next, false, false
	}

	switch sp := rw.regs[slotRSP]; sp.kind {
	case ruleUnset, ruleSame, ruleUndefined:
		next.sp = cfa // by definition of the CFA on x86-64
	default:
		if next.sp, ok = w.recover(sp, cfa, &f); !ok {
			return next, false, false
		}
	}
	if next.sp <= f.sp {
		return next, false, false // the stack grows down: no progress means a loop
	}

	switch fp := rw.regs[slotRBP]; fp.kind {
	case ruleUnset, ruleSame:
		next.fp, next.fpOK = f.fp, f.fpOK
	case ruleUndefined:
	default:
		// A saved rbp outside the snapshot only costs us rbp.
		next.fp, next.fpOK = w.recover(fp, cfa, &f)
	}
	return next, fd.cie.signal, true
}

// recover applies a register rule.
func (w *walker) recover(r regRule, cfa uint64, f *frame) (uint64, bool) {
	switch r.kind {
	case ruleOffset:
		return w.snap.word(cfa + uint64(r.off))
	case ruleValOffset:
		return cfa + uint64(r.off), true
	case ruleRegister:
		return f.reg(uint64(r.off))
	case ruleExpr:
		addr, ok := evalExpr(r.expr, &cfa, f, &w.snap)
		if !ok {
			return 0, false
		}
		return w.snap.word(addr)
	case ruleValExpr:
		return evalExpr(r.expr, &cfa, f, &w.snap)
	}
	return 0, false
}

// fpStep unwinds f by its frame pointer: [rbp] is the caller's rbp and
// [rbp+8] the return address.
func (w *walker) fpStep(f frame) (next frame, nextExact bool, ok bool) {
	if !f.fpOK || f.fp < f.sp || f.fp+16 < f.fp {
		return next, false, false
	}
	ra, ok1 := w.snap.word(f.fp + 8)
	fp, ok2 := w.snap.word(f.fp)
	if !ok1 || !ok2 {
		return next, false, false
	}
	return frame{pc: ra, sp: f.fp + 16, fp: fp, fpOK: true}, false, true
}

// object returns the CFI of file, mapped by p at m, loading it on first
// use; nil if it has none or cannot be read now.
func (u *Unwinder) object(p *symbolize.Process, m objfile.Mapping, file *objfile.File) *object {
	key := objectKey{buildID: file.BuildID()}
	if key.buildID == "" {
		key.file = file
	}
	u.mu.Lock()
	el, ok := u.byKey[key]
	if ok {
		u.lru.MoveToFront(el)
	} else {
		el = u.lru.PushFront(&entry{key: key})
		u.byKey[key] = el
		for u.lru.Len() > u.max {
			u.removeLocked(u.lru.Back())
		}
	}
	e := el.Value.(*entry)
	u.mu.Unlock()

	e.once.Do(func() { e.obj, e.err = loadObject(p, m, file) })
	if e.err != nil && !errors.Is(e.err, errNoCFI) && !errors.Is(e.err, errBadObject) {
		// Could not open the file (the process exited, ...): try again
		// next time instead of remembering the failure.
		u.mu.Lock()
		if u.byKey[key] == el {
			u.removeLocked(el)
		}
		u.mu.Unlock()
	}
	return e.obj
}

func (u *Unwinder) removeLocked(el *list.Element) {
	e := u.lru.Remove(el).(*entry)
	delete(u.byKey, e.key)
}

// errBadObject wraps errors about the contents of a file, which retrying
// will not fix.
var errBadObject = errors.New("bad object")

// loadObject reads the CFI of file through mapping m of process p.
func loadObject(p *symbolize.Process, m objfile.Mapping, file *objfile.File) (*object, error) {
	paths := []string{m.OpenPath(p.Pid())}
	if fp := file.Path(); fp != paths[0] {
		paths = append(paths, fp)
	}
	var err error
	for _, path := range paths {
		var fd *os.File
		if fd, err = objfile.OpenFile(path); err != nil {
			continue
		}
		var fi os.FileInfo
		if fi, err = fd.Stat(); err == nil {
			var obj *object
			obj, err = parseObject(fd, fi.Size(), loadOptions{})
			if err != nil && !errors.Is(err, errNoCFI) {
				err = errors.Join(errBadObject, err)
			}
			fd.Close()
			return obj, err
		}
		fd.Close()
	}
	return nil, err
}
