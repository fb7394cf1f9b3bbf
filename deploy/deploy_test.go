// Package deploy holds the agent's Kubernetes manifests, image recipe,
// alert rules and dashboard; its test checks them offline.
package deploy

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestManifests: every document of daemonset.yaml decodes strictly into
// its Kubernetes API type (a misspelt or misplaced field fails), and the
// DaemonSet asks for exactly the privileges the agent uses.
func TestManifests(t *testing.T) {
	data, err := os.ReadFile("daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		kinds[meta.Kind]++
		var obj any
		switch meta.Kind {
		case "Namespace":
			obj = &corev1.Namespace{}
		case "ServiceAccount":
			obj = &corev1.ServiceAccount{}
		case "DaemonSet":
			obj = &appsv1.DaemonSet{}
		default:
			t.Fatalf("unexpected kind %q", meta.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Errorf("%s: %v", meta.Kind, err)
			continue
		}
		ds, ok := obj.(*appsv1.DaemonSet)
		if !ok {
			continue
		}
		spec := ds.Spec.Template.Spec
		if !spec.HostPID || len(spec.Containers) != 1 {
			t.Fatalf("the agent needs hostPID and one container")
		}
		c := spec.Containers[0]
		sc := c.SecurityContext
		if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.Capabilities == nil {
			t.Fatal("the agent must not be privileged, and must list its capabilities")
		}
		var caps []string
		for _, c := range sc.Capabilities.Add {
			caps = append(caps, string(c))
		}
		if want := "BPF PERFMON SYS_PTRACE SYS_RESOURCE DAC_READ_SEARCH CHECKPOINT_RESTORE"; strings.Join(caps, " ") != want {
			t.Errorf("capabilities %v, want %s", caps, want)
		}
		if c.Resources.Limits.Memory().IsZero() || c.Resources.Limits.Cpu().IsZero() || c.LivenessProbe == nil || c.ReadinessProbe == nil {
			t.Error("resource limits and both probes are required")
		}
		if p := c.ReadinessProbe.HTTPGet; p == nil || p.Path != "/healthz" {
			t.Error("readiness must be /healthz, the path that needs no token")
		}
	}
	if kinds["DaemonSet"] != 1 {
		t.Errorf("kinds %v: want one DaemonSet", kinds)
	}
}

// TestAlertRules: promtool (Debian's prometheus package; make test-deps
// installs it) accepts the rules.
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI needs promtool (Debian's prometheus package; make test-deps installs it)")
		}
		t.Skip("no promtool: make test-deps installs it")
	}
	if out, err := exec.Command(promtool, "check", "rules", "alerts.yaml").CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
}

// TestMetricNames: the dashboard is valid JSON, and every cudatap_* series
// the rules and the dashboard use is one the agent exports (named in its
// sources, or made by client_golang's process collector).
func TestMetricNames(t *testing.T) {
	dash, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(dash, &d); err != nil || len(d.Panels) == 0 {
		t.Fatalf("dashboard.json: %v (%d panels)", err, len(d.Panels))
	}
	rules, err := os.ReadFile("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var src bytes.Buffer
	for _, dir := range []string{"../cmd/cudatap", "../export/metrics"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && !strings.HasSuffix(f, "_test.go") {
				src.Write(b)
			}
		}
	}
	name := regexp.MustCompile(`cudatap_[a-z0-9_]+`)
	for _, m := range name.FindAllString(string(rules)+string(dash), -1) {
		base := m
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, suffix)
		}
		if strings.HasPrefix(base, "cudatap_agent_process_") || strings.Contains(src.String(), `"`+base+`"`) {
			continue
		}
		t.Errorf("%s: the agent exports no such series", m)
	}
}
