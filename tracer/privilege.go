package tracer

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Capability bits (linux/capability.h).
const (
	capSysPtrace = 19
	capSysAdmin  = 21
	capPerfmon   = 38
	capBPF       = 39
)

// ErrPrivileges means the process may not load BPF programs or read targets.
var ErrPrivileges = errors.New("insufficient privileges")

// Capabilities returns the effective capability set of this process.
func Capabilities() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("no CapEff in /proc/self/status")
}

// MissingCapabilities names the capabilities cudatap needs and lacks.
func MissingCapabilities() []string {
	caps, err := Capabilities()
	if err != nil {
		return []string{"(could not read capabilities: " + err.Error() + ")"}
	}
	has := func(bit uint) bool { return caps&(1<<bit) != 0 }
	var missing []string
	if !has(capBPF) && !has(capSysAdmin) {
		missing = append(missing, "CAP_BPF")
	}
	if !has(capPerfmon) && !has(capSysAdmin) {
		missing = append(missing, "CAP_PERFMON")
	}
	if !has(capSysPtrace) {
		missing = append(missing, "CAP_SYS_PTRACE")
	}
	return missing
}

// CheckPrivileges fails with what to do when capabilities are missing.
func CheckPrivileges() error {
	missing := MissingCapabilities()
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: missing %s; run cudatap as root (sudo cudatap ...) or grant them: "+
		"sudo setcap cap_bpf,cap_perfmon,cap_sys_ptrace,cap_sys_admin+ep $(command -v cudatap)",
		ErrPrivileges, strings.Join(missing, ", "))
}

// KernelSupport checks what cudatap needs from the kernel; each problem is
// a sentence that says what is missing.
func KernelSupport() []string {
	var problems []string
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		problems = append(problems, "no BTF (/sys/kernel/btf/vmlinux missing): use a kernel built with CONFIG_DEBUG_INFO_BTF=y")
	}
	if !uprobesAvailable() {
		problems = append(problems, "no uprobe support: the kernel needs CONFIG_UPROBE_EVENTS=y")
	}
	return problems
}

func uprobesAvailable() bool {
	for _, p := range []string{"/sys/bus/event_source/devices/uprobe/type", "/sys/kernel/tracing/uprobe_events", "/sys/kernel/debug/tracing/uprobe_events"} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}
