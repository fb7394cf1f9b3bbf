package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/nvml/nvmlmock"
)

func noCUPTI() (string, string) { return "", "looked nowhere" }

func checkNamed(t *testing.T, r *doctorReport, name string) doctorCheck {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no %q check in %+v", name, r.Checks)
	return doctorCheck{}
}

// TestDoctorWithoutGPU: no NVML library and no CUPTI are warnings that
// say what is missing, not failures: doctor still exits 0 where tracing works.
func TestDoctorWithoutGPU(t *testing.T) {
	srv := nvmlmock.NewH200(1)
	srv.InitReturn = gonvml.ERROR_LIBRARY_NOT_FOUND // what the real library says on this machine
	r := diagnose(nil, srv, noCUPTI)
	if c := checkNamed(t, r, "NVML (GPU counters)"); c.Status != "warn" || !strings.Contains(c.Detail, "libnvidia-ml.so.1") {
		t.Errorf("NVML check without NVML: %+v, want a warning naming libnvidia-ml.so.1", c)
	}
	if c := checkNamed(t, r, "CUPTI (GPU times)"); c.Status != "warn" || !strings.Contains(c.Detail, "looked nowhere") || !strings.Contains(c.Detail, "--cupti PATH") {
		t.Errorf("CUPTI check without CUPTI: %+v, want a warning saying where it looked and what to do", c)
	}
	fails := 0
	for _, c := range r.Checks {
		if c.Status == "fail" {
			fails++
		}
	}
	if fails != len(r.failures) || r.OK != (fails == 0) {
		t.Errorf("%d failed checks, %d failures, ok %v: warnings must not fail doctor", fails, len(r.failures), r.OK)
	}
	if c := checkNamed(t, r, "architecture"); (c.Status == "ok") != (runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64") {
		t.Errorf("architecture check on %s: %+v", runtime.GOARCH, c)
	}

	// The command as a user runs it: the warnings shown, exit status 0.
	testutil.RequireRoot(t)
	cmd := newDoctorCmd(&globalOptions{}, srv)
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{}) // not nil: cobra would parse the test binary's own arguments
	if err := cmd.Execute(); err != nil {
		t.Errorf("doctor without a GPU, as root: %v, want exit status 0\n%s", err, out.String())
	}
	for _, want := range []string{"[warn] NVML (GPU counters)", "[warn] CUPTI (GPU times)", "[ok  ] architecture"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestDoctorSeesGPUs: with NVML, how many GPUs, their names and the driver.
func TestDoctorSeesGPUs(t *testing.T) {
	r := diagnose(nil, nvmlmock.NewH200(2), noCUPTI)
	if c := checkNamed(t, r, "NVML (GPU counters)"); c.Status != "ok" || c.Detail != "2 GPU(s) (NVIDIA H200, NVIDIA H200), driver 580.95.05" {
		t.Errorf("NVML check with two H200s: %+v", c)
	}
}

// TestCUPTILookup: the toolkit's CUPTI, else a pip wheel's in the active
// virtualenv or the system's Python; the path as the host sees it.
func TestCUPTILookup(t *testing.T) {
	env := func(vars ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(vars); i += 2 {
				if vars[i] == k {
					return vars[i+1]
				}
			}
			return ""
		}
	}
	root := t.TempDir()
	place := func(path string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, path), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if path, searched := cuptiOn(root, env("HOME", "/home/u")); path != "" ||
		!strings.Contains(searched, "nvidia/cu13/lib/libcupti.so.13") || !strings.Contains(searched, "/home/u/.local/lib/python3*/*-packages") {
		t.Errorf("nothing installed: found %q, searched %q", path, searched)
	}
	cu12 := "/usr/local/lib/python3.10/dist-packages/nvidia/cuda_cupti/lib/libcupti.so.12"
	place(cu12)
	if path, _ := cuptiOn(root, env()); path != cu12 {
		t.Errorf("CUDA 12 wheel in the system's Python: found %q, want %q", path, cu12)
	}
	venv := "/srv/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcupti.so.13"
	place(venv)
	if path, _ := cuptiOn(root, env("VIRTUAL_ENV", "/srv/venv")); path != venv {
		t.Errorf("CUDA 13 wheel in the active virtualenv: found %q, want %q (before the system's)", path, venv)
	}
	toolkit := "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"
	place(toolkit)
	if path, _ := cuptiOn(root, env("VIRTUAL_ENV", "/srv/venv")); path != toolkit {
		t.Errorf("with the toolkit's too: found %q, want the toolkit's %q named first", path, toolkit)
	}
}
