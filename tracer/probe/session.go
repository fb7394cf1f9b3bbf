package probe

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// cilium/ebpf v0.22 creates uprobe_multi links of one attach type only
// (BPF_TRACE_UPROBE_MULTI); a session link is the same link with
// BPF_TRACE_UPROBE_SESSION, made here with the bpf syscall.

const (
	bpfLinkCreate         = 28 // BPF_LINK_CREATE
	bpfTraceUprobeSession = 57 // enum bpf_attach_type
)

// linkCreateUprobeMulti is union bpf_attr's link_create for uprobe_multi
// links (include/uapi/linux/bpf.h).
type linkCreateUprobeMulti struct {
	progFD        uint32
	targetFD      uint32
	attachType    uint32
	flags         uint32
	path          uint64
	offsets       uint64
	refCtrOffsets uint64
	cookies       uint64
	count         uint32
	multiFlags    uint32
	pid           uint32
	_             uint32
}

// uprobeSession attaches prog, a uprobe.session program, at the file
// offsets of path (cookies alike), for pid (0: every process).
func uprobeSession(prog *ebpf.Program, path string, offsets, cookies []uint64, pid int) (link.Link, error) {
	if len(offsets) == 0 || len(offsets) != len(cookies) {
		return nil, fmt.Errorf("uprobe session on %s: %d offsets, %d cookies", path, len(offsets), len(cookies))
	}
	cpath, err := unix.BytePtrFromString(path)
	if err != nil {
		return nil, err
	}
	attr := linkCreateUprobeMulti{
		progFD:     uint32(prog.FD()),
		attachType: bpfTraceUprobeSession,
		path:       uint64(uintptr(unsafe.Pointer(cpath))),
		offsets:    uint64(uintptr(unsafe.Pointer(&offsets[0]))),
		cookies:    uint64(uintptr(unsafe.Pointer(&cookies[0]))),
		count:      uint32(len(offsets)),
		pid:        uint32(pid),
	}
	fd, _, errno := unix.Syscall(unix.SYS_BPF, bpfLinkCreate, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(cpath)
	runtime.KeepAlive(offsets)
	runtime.KeepAlive(cookies)
	if errno != 0 {
		return nil, fmt.Errorf("create uprobe session link on %s: %w", path, errno)
	}
	l, err := link.NewFromFD(int(fd))
	if err != nil {
		unix.Close(int(fd))
		return nil, fmt.Errorf("uprobe session link on %s: %w", path, err)
	}
	return l, nil
}
