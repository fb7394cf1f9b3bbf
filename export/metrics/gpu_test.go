package metrics

import (
	"math"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cudatap/cudatap/tracer/gpusample"
)

// TestGPUCollector: the latest sample per device, with dcgm-exporter's
// labels; unsupported fields left out; per-process memory with the
// process's labels; Xid errors counted; NVML's state reported.
func TestGPUCollector(t *testing.T) {
	c := NewGPUCollector(GPUOptions{Host: "node-7", PID: true})
	var gpusAsked []string
	c.SetLabelers(func(_ uint32, gpus ...string) ProcLabels {
		gpusAsked = gpus
		return ProcLabels{"python3", "main", "trainer-0", "ml"}
	}, func(uuid string) ProcLabels {
		if uuid == "GPU-1" {
			return ProcLabels{Pod: "trainer-0", Namespace: "ml", Container: "main"}
		}
		return ProcLabels{}
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP cudatap_agent_nvml_up 1 when NVML answers (GPU series are exported), 0 when it is absent or failing.
# TYPE cudatap_agent_nvml_up gauge
cudatap_agent_nvml_up{Hostname="node-7"} 0
`), "cudatap_agent_nvml_up"); err != nil {
		t.Error(err)
	}
	c.SetUp(true)
	old := gpusample.Sample{Device: 1, UUID: "GPU-1", Name: "NVIDIA H200", GPUUtil: 10, TempC: math.NaN(), PowerW: math.NaN(), PowerLimitW: math.NaN()}
	c.Add(old)
	c.Add(gpusample.Sample{Device: 1, UUID: "GPU-1", Name: "NVIDIA H200", GPUUtil: 25, MemUtil: 5, MemUsed: 1 << 30, MemTotal: 141 << 30,
		TempC: math.NaN(), PowerW: 205.5, PowerLimitW: 700, SMClockMHz: 1980, MemClockMHz: 2619,
		Processes: []gpusample.ProcSample{{PID: 4123, MemUsed: 880 << 20, SMUtil: math.NaN()}}})
	c.Event(gpusample.Event{Device: 1, Kind: "xid", Data: 79})
	c.Event(gpusample.Event{Device: 1, Kind: "xid", Data: 79})
	c.Event(gpusample.Event{Device: 1, Kind: "ecc_single_bit"})
	want := `
# HELP cudatap_gpu_utilization_ratio Share of time a kernel ran on the GPU (NVML utilization.gpu).
# TYPE cudatap_gpu_utilization_ratio gauge
cudatap_gpu_utilization_ratio{Hostname="node-7",UUID="GPU-1",container="main",gpu="1",model_name="NVIDIA H200",namespace="ml",pod="trainer-0"} 0.25
# HELP cudatap_gpu_power_watts Power draw.
# TYPE cudatap_gpu_power_watts gauge
cudatap_gpu_power_watts{Hostname="node-7",UUID="GPU-1",container="main",gpu="1",model_name="NVIDIA H200",namespace="ml",pod="trainer-0"} 205.5
# HELP cudatap_gpu_process_memory_used_bytes Device memory a process uses on the GPU (NVML); without the pid label, the processes of a group on the GPU added up.
# TYPE cudatap_gpu_process_memory_used_bytes gauge
cudatap_gpu_process_memory_used_bytes{Hostname="node-7",UUID="GPU-1",comm="python3",container="main",gpu="1",model_name="NVIDIA H200",namespace="ml",pid="4123",pod="trainer-0"} 9.2274688e+08
# HELP cudatap_gpu_xid_errors_total Xid errors the driver reported while the agent watched.
# TYPE cudatap_gpu_xid_errors_total counter
cudatap_gpu_xid_errors_total{Hostname="node-7",UUID="GPU-1",gpu="1",model_name="NVIDIA H200",xid="79"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "cudatap_gpu_utilization_ratio", "cudatap_gpu_power_watts",
		"cudatap_gpu_process_memory_used_bytes", "cudatap_gpu_xid_errors_total"); err != nil {
		t.Error(err)
	}
	if len(gpusAsked) != 1 || gpusAsked[0] != "GPU-1" {
		t.Errorf("a process on GPU-1 was named with GPUs %v, want [GPU-1] (its container in a pod of several)", gpusAsked)
	}
	if n := testutil.CollectAndCount(c, "cudatap_gpu_temperature_celsius"); n != 0 {
		t.Errorf("an unsupported temperature was exported (%d series)", n)
	}
}
