package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/tracer/nvml"
)

func newGPUsCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "gpus",
		Short: "List the GPUs and the processes using them (PID, container, memory, utilization)",
		Long: `gpus shows every visible NVIDIA GPU (utilization over the last second, memory,
temperature, power, clocks, throttle reasons) and the processes using each one,
with their container, like nvidia-smi with container names. It needs NVML
(libnvidia-ml.so.1, installed with the NVIDIA driver).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := nvml.New(nvml.Options{Interval: time.Second, Logger: g.logger()})
			if err != nil {
				return err // one line: what is missing, and that the rest of cudatap works
			}
			defer s.Close()
			samples, _, err := s.Poll()
			if err != nil {
				return err
			}
			return renderGPUs(cmd.OutOrStdout(), s.Driver(), samples, gpuProcInfo)
		},
	}
}

// gpuProcInfo names a process using a GPU from /proc: its command name and
// its container (short id, with the container's hostname, which is the pod
// name under Kubernetes, when it says more than the id).
func gpuProcInfo(pid uint32) procInfo {
	var info procInfo
	info.Comm, _ = procfs.Comm(int(pid))
	cgroup, err := procfs.Cgroup(int(pid))
	if err != nil {
		return info
	}
	id, _ := procfs.ContainerFromCgroup(cgroup)
	if id == "" {
		return info
	}
	short := id[:min(12, len(id))]
	info.Container = short
	if name, err := procfs.RootHostname(int(pid)); err == nil {
		host, _ := os.Hostname()
		if name != "" && name != host && !strings.HasPrefix(id, name) {
			info.Container = fmt.Sprintf("%s (%s)", short, name)
		}
	}
	return info
}
