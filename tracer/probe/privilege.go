package probe

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cudatap/cudatap/internal/procfs"
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

// MissingCapabilities names the capabilities cudatap needs and lacks.
func MissingCapabilities() []string {
	caps, err := procfs.CapEff()
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
