package resolve

import (
	"strings"

	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/tracer/model"
)

// readProcessInfo names a process from /proc while it is alive.
func readProcessInfo(pid uint32) model.ProcessInfo {
	var info model.ProcessInfo
	info.Comm, _ = procfs.Comm(int(pid))
	if args, err := procfs.Cmdline(int(pid)); err == nil {
		info.Cmdline = strings.TrimSpace(strings.Join(args, " "))
	}
	if n, err := procfs.NSPID(int(pid)); err == nil {
		info.NSPID = uint32(n)
	}
	if cg, err := procfs.Cgroup(int(pid)); err == nil {
		info.Container, info.PodUID = procfs.ContainerFromCgroup(cg)
	}
	return info
}

func readThreadName(pid, tid uint32) string {
	name, _ := procfs.ThreadComm(int(pid), int(tid))
	return name
}
