package session

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/cudatap/cudatap/tracer/model"
)

// readProcessInfo names a process from /proc while it is alive.
func readProcessInfo(pid uint32) model.ProcessInfo {
	var info model.ProcessInfo
	info.Comm = readTrim(fmt.Sprintf("/proc/%d/comm", pid))
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil {
		info.Cmdline = strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
	}
	info.NSPID = nsPID(pid)
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); err == nil {
		info.Container, info.PodUID = ContainerFromCgroup(string(b))
	}
	return info
}

func readThreadName(pid, tid uint32) string {
	return readTrim(fmt.Sprintf("/proc/%d/task/%d/comm", pid, tid))
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// nsPID is the pid of the process inside its own (innermost) PID namespace.
func nsPID(pid uint32) uint32 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "NSpid:"); ok {
			fields := strings.Fields(v)
			if len(fields) > 0 {
				n, _ := strconv.ParseUint(fields[len(fields)-1], 10, 32)
				return uint32(n)
			}
		}
	}
	return 0
}

var (
	containerID = regexp.MustCompile(`(?:^|[/-])([0-9a-f]{64})(?:\.scope)?$`)
	podUID      = regexp.MustCompile(`pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})`)
)

// ContainerFromCgroup finds a container id (docker, containerd, cri-o:
// 64 hex digits) and a Kubernetes pod UID in a /proc/PID/cgroup text.
func ContainerFromCgroup(cgroup string) (container, pod string) {
	for _, line := range strings.Split(cgroup, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		path := parts[2]
		for _, seg := range strings.Split(path, "/") {
			if m := containerID.FindStringSubmatch(seg); m != nil {
				container = m[1]
			}
			if m := podUID.FindStringSubmatch(seg); m != nil {
				pod = strings.ReplaceAll(m[1], "_", "-")
			}
		}
	}
	return container, pod
}
