// Package procfs reads the /proc files cudatap needs, and is the only
// package that parses them, but for the memory maps: it hands those over
// raw, and internal/objfile, which owns the mappings, parses them. Every
// function takes and returns plain values; a process that has gone shows as
// an error wrapping os.ErrNotExist, or as false.
package procfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
)

// ClockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat
// (100 on every Linux architecture cudatap runs on).
const ClockTicks = 100

func path(pid int, file string) string { return "/proc/" + strconv.Itoa(pid) + "/" + file }

func readTrim(name string) (string, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// Comm is the command name of a process (/proc/PID/comm, at most 15 bytes).
func Comm(pid int) (string, error) { return readTrim(path(pid, "comm")) }

// ThreadComm is the name of thread tid of process pid.
func ThreadComm(pid, tid int) (string, error) {
	return readTrim(path(pid, "task/"+strconv.Itoa(tid)+"/comm"))
}

// Cmdline is the argument vector of a process; empty for a kernel thread
// or a zombie.
func Cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile(path(pid, "cmdline"))
	if err != nil {
		return nil, err
	}
	return parseCmdline(b), nil
}

func parseCmdline(b []byte) []string {
	b = bytes.TrimSuffix(b, []byte{0})
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(b), "\x00")
}

// NSPID is the pid of a process inside its innermost PID namespace (the
// last NSpid field of /proc/PID/status): the pid the process sees itself.
func NSPID(pid int) (int, error) { return lastNSpid(path(pid, "status")) }

// ThreadNSPID is the id of thread tid of process pid inside the process's
// innermost PID namespace (what CPython stores as native_thread_id).
func ThreadNSPID(pid, tid int) (int, error) {
	return lastNSpid(path(pid, "task/"+strconv.Itoa(tid)+"/status"))
}

func lastNSpid(name string) (int, error) {
	v, err := statusField(name, "NSpid")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(v)
	if len(f) == 0 {
		return 0, fmt.Errorf("empty NSpid in %s", name)
	}
	n, err := strconv.Atoi(f[len(f)-1])
	if err != nil {
		return 0, fmt.Errorf("NSpid in %s: %w", name, err)
	}
	if n == 0 {
		// A task that has exited and is not reaped yet has no PID left
		// in any namespace: the kernel shows 0.
		return 0, fmt.Errorf("%s: NSpid 0: the task has exited", name)
	}
	return n, nil
}

// PIDs lists the processes of this PID namespace: the numeric entries of
// /proc.
func PIDs() ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	pids := make([]int, 0, len(ents))
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// CapEff is the effective capability set of this process.
func CapEff() (uint64, error) {
	v, err := statusField("/proc/self/status", "CapEff")
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(v, 16, 64)
}

// statusField is the value of "key:" in a /proc/.../status file.
func statusField(name, key string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	v, ok, err := findField(f, key)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	if !ok {
		return "", fmt.Errorf("no %s in %s", key, name)
	}
	return v, nil
}

func findField(r io.Reader, key string) (string, bool, error) {
	sc := bufio.NewScanner(r)
	prefix := key + ":"
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			return strings.TrimSpace(v), true, nil
		}
	}
	return "", false, sc.Err()
}

// ProcessStat is what cudatap reads of /proc/PID/stat.
type ProcessStat struct {
	State    byte   // R, S, D, Z, X, ...
	CPUTicks uint64 // utime + stime, in ClockTicks
	// StartTicks is when the process started, in ClockTicks after boot:
	// with the PID, it names one process (PIDs are reused).
	StartTicks uint64
}

// Stat reads /proc/PID/stat.
func Stat(pid int) (ProcessStat, error) {
	b, err := os.ReadFile(path(pid, "stat"))
	if err != nil {
		return ProcessStat{}, err
	}
	st, err := parseStat(b)
	if err != nil {
		return ProcessStat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return st, nil
}

// parseStat reads a /proc/PID/stat line. The comm field (2) is in
// parentheses and may itself hold spaces and ')': the fields resume after
// the last ')'.
func parseStat(b []byte) (ProcessStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ProcessStat{}, errors.New("no ')' after the command name")
	}
	// Fields from 3 (state) on; utime and stime are fields 14 and 15,
	// starttime 22.
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return ProcessStat{}, fmt.Errorf("%d fields after the command name, want at least 20", len(f))
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	start, err3 := strconv.ParseUint(f[19], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return ProcessStat{}, err
	}
	return ProcessStat{State: f[0][0], CPUTicks: utime + stime, StartTicks: start}, nil
}

// Alive reports whether a process exists and is not a zombie.
func Alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false // the cheap answer for the common case: gone
	}
	st, err := Stat(pid)
	return err == nil && st.State != 'Z' && st.State != 'X'
}

// ThreadAlive reports whether a thread (a host tid) exists. /proc/TID
// resolves for every thread, though only processes are listed.
func ThreadAlive(tid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(tid))
	return err == nil
}

// Maps is the text of /proc/PID/maps; internal/objfile parses it. The
// error wraps os.ErrNotExist when the process is gone, also when it exited
// while being read (ESRCH).
func Maps(pid int) ([]byte, error) {
	b, err := os.ReadFile(path(pid, "maps"))
	if errors.Is(err, syscall.ESRCH) {
		err = fmt.Errorf("%w: %w", os.ErrNotExist, err)
	}
	return b, err
}

// Cgroup is the text of /proc/PID/cgroup.
func Cgroup(pid int) (string, error) {
	b, err := os.ReadFile(path(pid, "cgroup"))
	return string(b), err
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
		for _, seg := range strings.Split(parts[2], "/") {
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

// RootHostname is /etc/hostname as the process sees it (through
// /proc/PID/root): its container's hostname, the pod name under Kubernetes.
func RootHostname(pid int) (string, error) { return readTrim(path(pid, "root/etc/hostname")) }

// Exe is the path of a process's executable, without the " (deleted)"
// the kernel appends once the file is gone.
func Exe(pid int) (string, error) {
	p, err := os.Readlink(path(pid, "exe"))
	return strings.TrimSuffix(p, " (deleted)"), err
}

// Cgroup2Mount is where this process sees the cgroup v2 hierarchy mounted
// (/sys/fs/cgroup, or /sys/fs/cgroup/unified on hybrid hosts), "" if none.
func Cgroup2Mount() string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS... - FSTYPE SOURCE SUPER
		pre, post, ok := strings.Cut(line, " - ")
		f := strings.Fields(pre)
		if ok && len(f) >= 5 && strings.HasPrefix(post, "cgroup2 ") {
			return f[4]
		}
	}
	return ""
}

// Getenv is the value of the environment variable name in pid's initial
// environment (what it was started with), "" when unset or unreadable.
func Getenv(pid int, name string) string {
	b, err := os.ReadFile(path(pid, "environ"))
	if err != nil {
		return ""
	}
	for _, kv := range strings.Split(string(b), "\x00") {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// OSRelease is the running kernel's release (uname -r).
func OSRelease() (string, error) { return readTrim("/proc/sys/kernel/osrelease") }

// BootID identifies this boot of the host (/proc/sys/kernel/random/boot_id):
// CLOCK_MONOTONIC readings with the same boot id are on one clock.
func BootID() (string, error) { return readTrim("/proc/sys/kernel/random/boot_id") }

// RSS is the resident set size of pid in bytes (VmRSS), 0 when unknown.
func RSS(pid int) int64 {
	v, err := statusField(path(pid, "status"), "VmRSS")
	if err != nil {
		return 0
	}
	kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
	if err != nil {
		return 0
	}
	return kb << 10
}

// TIDs lists the threads of process pid (none if it is gone).
func TIDs(pid int) []int {
	ents, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	out := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out
}
