package nvml_test

import (
	"fmt"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// realLib opens the machine's NVML, skipping the benchmark without it.
func realLib(b *testing.B) gonvml.Interface {
	b.Helper()
	lib := gonvml.New()
	if ret := lib.Init(); ret != gonvml.SUCCESS {
		b.Skipf("no NVML: %v", ret)
	}
	b.Cleanup(func() { lib.Shutdown() })
	return lib
}

// BenchmarkRealCall is what each NVML call the sampler makes costs on
// this machine's GPU 0 (skipped without NVML): ns/op per call.
func BenchmarkRealCall(b *testing.B) {
	d, ret := realLib(b).DeviceGetHandleByIndex(0)
	if ret != gonvml.SUCCESS {
		b.Skipf("no GPU 0: %v", ret)
	}
	now := uint64(time.Now().UnixMicro())
	calls := []struct {
		name string
		f    func() gonvml.Return
	}{
		{"GetSamples/GPU", func() gonvml.Return { _, _, r := d.GetSamples(gonvml.GPU_UTILIZATION_SAMPLES, now-100000); return r }},
		{"GetSamples/MEM", func() gonvml.Return { _, _, r := d.GetSamples(gonvml.MEMORY_UTILIZATION_SAMPLES, now-100000); return r }},
		{"GetUtilizationRates", func() gonvml.Return { _, r := d.GetUtilizationRates(); return r }},
		{"GetMemoryInfo_v2", func() gonvml.Return { _, r := d.GetMemoryInfo_v2(); return r }},
		{"GetTemperature", func() gonvml.Return { _, r := d.GetTemperature(gonvml.TEMPERATURE_GPU); return r }},
		{"GetPowerUsage", func() gonvml.Return { _, r := d.GetPowerUsage(); return r }},
		{"GetEnforcedPowerLimit", func() gonvml.Return { _, r := d.GetEnforcedPowerLimit(); return r }},
		{"GetClockInfo/SM", func() gonvml.Return { _, r := d.GetClockInfo(gonvml.CLOCK_SM); return r }},
		{"GetClockInfo/MEM", func() gonvml.Return { _, r := d.GetClockInfo(gonvml.CLOCK_MEM); return r }},
		{"GetMaxClockInfo/SM", func() gonvml.Return { _, r := d.GetMaxClockInfo(gonvml.CLOCK_SM); return r }},
		{"GetCurrentClocksEventReasons", func() gonvml.Return { _, r := d.GetCurrentClocksEventReasons(); return r }},
		{"GetFieldValues/PCIe", func() gonvml.Return {
			v := []gonvml.FieldValue{{FieldId: gonvml.FI_DEV_PCIE_COUNT_TX_BYTES}, {FieldId: gonvml.FI_DEV_PCIE_COUNT_RX_BYTES}}
			return d.GetFieldValues(v)
		}},
		{"GetComputeRunningProcesses", func() gonvml.Return { _, r := d.GetComputeRunningProcesses(); return r }},
		{"GetProcessUtilization", func() gonvml.Return { _, r := d.GetProcessUtilization(now - 100000); return r }},
		{"GetPcieThroughput/TX", func() gonvml.Return { _, r := d.GetPcieThroughput(gonvml.PCIE_UTIL_TX_BYTES); return r }},
	}
	for _, c := range calls {
		b.Run(c.name, func(b *testing.B) {
			// A call the GPU does not support still costs a round trip to
			// the driver: measured all the same, its answer logged.
			if r := c.f(); r != gonvml.SUCCESS {
				b.Logf("%s: %v", c.name, r)
			}
			for b.Loop() {
				c.f()
			}
		})
	}
}

// BenchmarkRealSampleLead measures how far NVML's timestamps run ahead of
// the host wall clock read right after the call returns, per GPU (skipped
// without NVML): the most a sample buffer entry, a process utilization
// entry and a field value led by, in µs (0 or less: never ahead).
func BenchmarkRealSampleLead(b *testing.B) {
	lib := realLib(b)
	n, ret := lib.DeviceGetCount()
	if ret != gonvml.SUCCESS || n == 0 {
		b.Skipf("no GPU: %v", ret)
	}
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			b.Fatalf("GPU %d: %v", i, ret)
		}
		b.Run(fmt.Sprintf("gpu%d", i), func(b *testing.B) {
			const never = -1 << 62
			sampleLead, procLead, fieldLead := int64(never), int64(never), int64(never)
			for b.Loop() {
				_, buf, ret := d.GetSamples(gonvml.GPU_UTILIZATION_SAMPLES, 0)
				w := time.Now().UnixMicro()
				if ret == gonvml.SUCCESS {
					for _, s := range buf {
						sampleLead = max(sampleLead, int64(s.TimeStamp)-w)
					}
				}
				procs, ret := d.GetProcessUtilization(0)
				w = time.Now().UnixMicro()
				if ret == gonvml.SUCCESS {
					for _, p := range procs {
						procLead = max(procLead, int64(p.TimeStamp)-w)
					}
				}
				fv := []gonvml.FieldValue{{FieldId: gonvml.FI_DEV_PCIE_COUNT_TX_BYTES}}
				if d.GetFieldValues(fv) == gonvml.SUCCESS && fv[0].NvmlReturn == uint32(gonvml.SUCCESS) {
					fieldLead = max(fieldLead, fv[0].Timestamp-time.Now().UnixMicro())
				}
			}
			for unit, lead := range map[string]int64{"sample-lead-µs": sampleLead, "proc-lead-µs": procLead, "field-lead-µs": fieldLead} {
				if lead != never {
					b.ReportMetric(float64(lead), unit)
				}
			}
		})
	}
}
