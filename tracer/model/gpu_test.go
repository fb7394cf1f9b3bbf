package model

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestGPUReportJSON(t *testing.T) {
	nan := Reading(math.NaN())
	in := GPUReport{ClockErrorNs: 1500,
		GPUs: []GPUStats{{Index: 0, Name: "NVIDIA H200", Samples: 2, UtilMean: 12.5, UtilPeak: 40, MemUtilMean: nan,
			MemPeak: 20 << 30, MemTotal: 143771 << 20, MemPeakPID: 4123, MemPeakPIDBytes: 19 << 30,
			PowerMeanW: nan, PowerPeakW: nan, PowerLimitW: nan, TempPeakC: 41, SMClockMeanMHz: 1980, SMClockMinMHz: 1980,
			ThrottlePolls: map[string]int{"gpu_idle": 1},
			Processes:     []GPUProcess{{PID: 4123, MemPeak: 19 << 30, Polls: 2, SMUtilMean: nan}}}},
		Traced: []TracedHost{{PID: 4123, CUDACalls: 5000, HostBusy: 0.87}, {PID: 5000, HostBusy: nan}},
		Events: []GPUEvent{{TS: 7, Device: 0, Kind: "xid", Data: 79}},
	}
	js, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"power_mean_w":null`, `"sm_util_mean_pct":null`, `"host_busy":null`, `"host_busy":0.87`, `"throttle_polls":{"gpu_idle":1}`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("%s lacks %s", js, want)
		}
	}
	var out GPUReport
	if err := json.Unmarshal(js, &out); err != nil {
		t.Fatal(err)
	}
	// NaN is never equal to itself: compare the JSON of both.
	back, _ := json.Marshal(out)
	if string(back) != string(js) || out.GPUs[0].PowerMeanW.Known() || !out.GPUs[0].UtilMean.Known() {
		t.Errorf("round trip\n %s\nwant\n %s", back, js)
	}
	if out.Traced[1].HostBusy.Known() || float64(out.Traced[0].HostBusy) != 0.87 {
		t.Errorf("readings %+v", out.Traced)
	}
}

// A GPU record from before the report held numbers still reads.
func TestGPUReportLegacyJSON(t *testing.T) {
	const old = `{"status":"","devices":["GPU 0 NVIDIA H200: 2 samples"],"verdicts":["host bound"],"clock_error_ns":1500}`
	var g GPUReport
	if err := json.Unmarshal([]byte(old), &g); err != nil {
		t.Fatal(err)
	}
	want := GPUReport{Devices: []string{"GPU 0 NVIDIA H200: 2 samples"}, Verdicts: []string{"host bound"}, ClockErrorNs: 1500}
	if !reflect.DeepEqual(g, want) {
		t.Errorf("%+v", g)
	}
}
