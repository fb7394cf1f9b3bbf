package probe

import (
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"

	"github.com/cudatap/cudatap/internal/procfs"
)

// FeatureSet is what this kernel and this process offer cudatap.
type FeatureSet struct {
	Kernel string // release, as uname -r
	// MissingCapabilities names the capabilities cudatap needs and lacks
	// (see CheckPrivileges); empty when it may load and attach.
	MissingCapabilities []string
	BTF                 bool // /sys/kernel/btf/vmlinux (CONFIG_DEBUG_INFO_BTF)
	Uprobes             bool // uprobe events (CONFIG_UPROBE_EVENTS)
	// Probed says whether RingBuffer and UprobeMulti were probed: that
	// loads BPF objects, which takes the capabilities above.
	Probed      bool
	RingBuffer  bool // BPF ring buffer maps (Linux 5.8+)
	UprobeMulti bool // uprobe_multi links (Linux 6.6+): one link per library; otherwise one uprobe per symbol
}

// Features looks at what this kernel and process offer. It loads nothing of
// cudatap's; the BPF probes it runs are cached for the life of the process.
func Features() FeatureSet {
	f := FeatureSet{
		MissingCapabilities: MissingCapabilities(),
		BTF:                 haveBTF(),
		Uprobes:             uprobesAvailable(),
	}
	f.Kernel, _ = procfs.OSRelease()
	if len(f.MissingCapabilities) == 0 {
		f.Probed = true
		f.RingBuffer = features.HaveMapType(ebpf.RingBuf) == nil
		f.UprobeMulti = features.HaveBPFLinkUprobeMulti() == nil
	}
	return f
}

// Problems are the missing kernel features that stop cudatap, each a
// sentence that says what to do (privileges are CheckPrivileges's).
func (f FeatureSet) Problems() []string {
	var problems []string
	if !f.BTF {
		problems = append(problems, "no BTF (/sys/kernel/btf/vmlinux missing): use a kernel built with CONFIG_DEBUG_INFO_BTF=y")
	}
	if !f.Uprobes {
		problems = append(problems, "no uprobe support: the kernel needs CONFIG_UPROBE_EVENTS=y")
	}
	if f.Probed && !f.RingBuffer {
		problems = append(problems, "no BPF ring buffer: cudatap needs Linux 5.8 or later")
	}
	return problems
}

func haveBTF() bool {
	_, err := os.Stat("/sys/kernel/btf/vmlinux")
	return err == nil
}

func uprobesAvailable() bool {
	for _, p := range []string{"/sys/bus/event_source/devices/uprobe/type", "/sys/kernel/tracing/uprobe_events", "/sys/kernel/debug/tracing/uprobe_events"} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}
