package resolve

// Kernel names that no symbol gives, decoded from the code of the files
// the process maps (objfile.KernelRegistrations), off the reader
// goroutine: a file the size of libtorch_cuda.so takes a fraction of a
// second. Until a result comes in the kernel stays unnamed; it is named
// when it does (PollKernels), and every scan still running is awaited at
// the end.
//
//   - A host stub without a symbol (a stripped library) is named by the
//     __cudaRegisterFunction call that registered it.
//   - A CUDA 13 kernel handle (what __cudaLaunchKernel hands the driver
//     launch, for kernels launched before cudatap attached) is named by
//     reading each stub's static handle variable from the process: its
//     value is the handle.

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/cudatap/cudatap/internal/objfile"
	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/tracer/model"
)

// kernelDecoder is the resolver's state for decoded kernel names (reader
// goroutine only, but for the channels).
type kernelDecoder struct {
	files         map[string]*objfile.Registrations // by file (dev:inode); nil: none found
	filePending   map[string][]pendingKernel        // files being decoded, and the stubs waiting
	fileDone      chan decodedFile
	handles       map[uint32]map[uint64]string // per process, kernel name by handle value
	handlePending map[uint32][]model.NameKey   // processes being read, and the handles waiting
	handleDone    chan decodedHandles
	decoder       *fileDecoder // shared by the goroutines
}

// fileDecoder decodes files one at a time (bounded CPU however many
// processes attach at once), each once.
type fileDecoder struct {
	mu    sync.Mutex
	cache map[string]*objfile.Registrations
}

// decode returns file key's registrations, decoding the first of paths that
// opens unless a goroutine did it before.
func (fd *fileDecoder) decode(key string, paths ...string) (*objfile.Registrations, error) {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	if regs, ok := fd.cache[key]; ok {
		return regs, nil
	}
	regs, err := decodeFile(paths...)
	if err == nil {
		if len(fd.cache) >= maxDecoded {
			clear(fd.cache)
		}
		fd.cache[key] = regs
	}
	return regs, err
}

// pendingKernel is a stub waiting for its file's registrations.
type pendingKernel struct {
	k   model.NameKey
	off uint64 // the stub's file offset
}

type decodedFile struct {
	key  string
	regs *objfile.Registrations
}

type decodedHandles struct {
	pid   uint32
	names map[uint64]string
}

func newKernelDecoder() kernelDecoder {
	return kernelDecoder{files: map[string]*objfile.Registrations{}, filePending: map[string][]pendingKernel{},
		fileDone: make(chan decodedFile, 16), handles: map[uint32]map[uint64]string{},
		handlePending: map[uint32][]model.NameKey{}, handleDone: make(chan decodedHandles, 16),
		decoder: &fileDecoder{cache: map[string]*objfile.Registrations{}}}
}

// maxDecoded bounds the files and processes whose results are kept.
const maxDecoded = 256

// decodedKernel names kernel key k (a stub or handle address) from decoded
// code, or starts the decoding and returns "".
func (r *Resolver) decodedKernel(k model.NameKey) string {
	p := r.look.Process(k.PID)
	if p == nil {
		return ""
	}
	m, ok := p.MappingAt(k.Key)
	if !ok {
		return ""
	}
	if m.IsFile() {
		return r.stubName(k, m.Dev+":"+strconv.FormatUint(m.Inode, 10), m.FileOffset(k.Key), m.OpenPath(int(k.PID)), m.Path)
	}
	// Not code: a kernel handle, which only matters for kernels launched
	// before cudatap attached (every later one is named by the calls that
	// load it).
	if r.attachedLate(k.PID) {
		return r.handleName(k)
	}
	return ""
}

func (r *Resolver) attachedLate(pid uint32) bool { return r.look.AttachedLate(pid) }

// stubName names the stub at file offset off of file key.
func (r *Resolver) stubName(k model.NameKey, key string, off uint64, paths ...string) string {
	d := &r.kernels
	if regs, ok := d.files[key]; ok {
		if regs == nil {
			return ""
		}
		return regs.Names[off]
	}
	wait := pendingKernel{k, off}
	if waiting, ok := d.filePending[key]; ok {
		d.filePending[key] = append(waiting, wait)
		return ""
	}
	d.filePending[key] = []pendingKernel{wait}
	log, decoder := r.log, d.decoder
	go func() {
		start := time.Now()
		regs, err := decoder.decode(key, paths...)
		n := 0
		if regs != nil {
			n = len(regs.Names)
		}
		log.Debug("kernel registrations", "file", paths[len(paths)-1], "kernels", n, "took", time.Since(start), "err", err)
		d.fileDone <- decodedFile{key, regs}
	}()
	return ""
}

// decodeFile decodes the first of paths that opens (the process's own view
// first; from here once it is gone).
func decodeFile(paths ...string) (*objfile.Registrations, error) {
	var err error
	for _, path := range paths {
		fd, oerr := objfile.OpenFile(path)
		if oerr != nil {
			err = oerr
			continue
		}
		defer fd.Close()
		return objfile.KernelRegistrations(fd)
	}
	return nil, err
}

// handleName names CUDA 13 kernel handle k from the process's handle
// variables, read once (see PrefetchHandles).
func (r *Resolver) handleName(k model.NameKey) string {
	d := &r.kernels
	if names, ok := d.handles[k.PID]; ok {
		return names[k.Key]
	}
	r.PrefetchHandles(k.PID)
	d.handlePending[k.PID] = append(d.handlePending[k.PID], k)
	return ""
}

// PrefetchHandles starts reading the kernel handles of process pid, once:
// every handle variable of the files it maps, decoded from their code. The
// session starts it when cudatap attaches to a running process (a
// targets.AttachedLate note), while the process surely lives: the handles
// were made before the attach.
func (r *Resolver) PrefetchHandles(pid uint32) {
	d := &r.kernels
	if _, done := d.handles[pid]; done {
		return
	}
	if _, running := d.handlePending[pid]; running {
		return
	}
	p := r.look.Process(pid)
	if p == nil {
		return
	}
	d.handlePending[pid] = []model.NameKey{}
	maps := p.Mappings()
	log, decoder := r.log, d.decoder
	go func() {
		start := time.Now()
		names := map[uint64]string{}
		seen := map[string]bool{}
		for _, m := range maps {
			key := m.Dev + ":" + strconv.FormatUint(m.Inode, 10)
			if !m.IsFile() || !m.Exec() || seen[key] {
				continue
			}
			seen[key] = true
			regs, err := decoder.decode(key, m.OpenPath(int(pid)), m.Path)
			if err != nil || regs == nil || len(regs.Handles) == 0 {
				continue
			}
			// The mapping holds the text: vaddr + bias is where the
			// process has it (one bias for every segment of a file).
			bias := m.Start - m.Offset + regs.TextOffset - regs.TextAddr
			for vaddr, stubOff := range regs.Handles {
				var b [8]byte
				if procfs.ReadMem(int(pid), vaddr+bias, b[:]) != nil {
					continue // gone
				}
				if h := binary.LittleEndian.Uint64(b[:]); h != 0 && regs.Names[stubOff] != "" {
					names[h] = regs.Names[stubOff]
				}
			}
		}
		log.Debug("kernel handles", "pid", pid, "named", len(names), "took", time.Since(start))
		d.handleDone <- decodedHandles{pid, names}
	}()
}

// PollKernels names the kernels whose decoding came in; with wait, it
// first waits for every decoding still running (the end).
func (r *Resolver) PollKernels(wait bool) {
	d := &r.kernels
	for len(d.filePending)+len(d.handlePending) > 0 {
		var file *decodedFile
		var handles *decodedHandles
		if wait {
			select {
			case f := <-d.fileDone:
				file = &f
			case h := <-d.handleDone:
				handles = &h
			}
		} else {
			select {
			case f := <-d.fileDone:
				file = &f
			case h := <-d.handleDone:
				handles = &h
			default:
				return
			}
		}
		if file != nil {
			if len(d.files) >= maxDecoded {
				clear(d.files)
			}
			d.files[file.key] = file.regs
			for _, p := range d.filePending[file.key] {
				if file.regs != nil {
					r.nameKernel(p.k, file.regs.Names[p.off])
				}
			}
			delete(d.filePending, file.key)
		}
		if handles != nil {
			if len(d.handles) >= maxDecoded {
				clear(d.handles)
			}
			d.handles[handles.pid] = handles.names
			for _, k := range d.handlePending[handles.pid] {
				r.nameKernel(k, handles.names[k.Key])
			}
			delete(d.handlePending, handles.pid)
		}
	}
}

// nameKernel records a name found after the kernel was first seen.
func (r *Resolver) nameKernel(k model.NameKey, name string) {
	if name == "" {
		return
	}
	r.names.Kernels[k] = name
	r.out.Kernel(k.PID, k.Key, name)
	r.log.Debug("kernel named", "pid", k.PID, "addr", fmt.Sprintf("%#x", k.Key), "name", name)
}
