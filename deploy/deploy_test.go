// Package deploy holds the agent's Kubernetes manifests, image recipe,
// alert rules and dashboard; its test checks them offline.
package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"
)

// metricsPort is the agent's port (its default, --listen 127.0.0.1:9401):
// not dcgm-exporter's 9400, which GPU nodes often run too.
const metricsPort = 9401

// TestManifests: every document of daemonset.yaml decodes strictly into
// its Kubernetes API type (a misspelt or misplaced field fails), the
// DaemonSet asks for exactly the privileges the agent uses (checkLeast),
// and the NetworkPolicy lets nothing out (checkNetwork).
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
		case "NetworkPolicy":
			obj = &networkingv1.NetworkPolicy{}
		default:
			t.Fatalf("unexpected kind %q", meta.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Errorf("%s: %v", meta.Kind, err)
			continue
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			if o.AutomountServiceAccountToken == nil || *o.AutomountServiceAccountToken {
				t.Error("the ServiceAccount must set automountServiceAccountToken: false (the agent never calls the API)")
			}
		case *networkingv1.NetworkPolicy:
			checkNetwork(t, o)
		}
		ds, ok := obj.(*appsv1.DaemonSet)
		if !ok {
			continue
		}
		checkLeast(t, ds)
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
	if kinds["DaemonSet"] != 1 || kinds["NetworkPolicy"] != 1 {
		t.Errorf("kinds %v: want one DaemonSet and its NetworkPolicy", kinds)
	}
}

// checkLeast: the DaemonSet grants no more than the agent uses (the
// 2026-12-01 review, 6a and 6b): the pod-resources socket is the only
// host path, read-only; no service-account token; a versioned image;
// ordinary priority; only the GPU taint tolerated; no scrape annotation
// that would scrape without the token; the Go heap limited under the
// memory limit, captures under the /tmp they are written to; and every
// flag one the agent has.
func checkLeast(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	for _, v := range spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		if v.HostPath.Path != "/var/lib/kubelet/pod-resources" {
			t.Errorf("host path %s mounted: the agent uses only the kubelet's pod-resources socket from the host", v.HostPath.Path)
		}
		if v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectory {
			t.Errorf("host path %s: want type Directory (the agent creates nothing on the host)", v.HostPath.Path)
		}
		if !mounts[v.Name].ReadOnly {
			t.Errorf("host path %s is mounted writable", v.HostPath.Path)
		}
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the pod must set automountServiceAccountToken: false (the agent never calls the API)")
	}
	if _, tag, ok := strings.Cut(c.Image[strings.LastIndexByte(c.Image, '/')+1:], ":"); !ok || !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(tag) {
		t.Errorf("image %s: want a release tag, vX.Y.Z as git describe --tags names it (not latest, not none)", c.Image)
	}
	if spec.PriorityClassName != "" {
		t.Errorf("priorityClassName %s: an observer runs at ordinary priority, never preempting the jobs it observes", spec.PriorityClassName)
	}
	for _, tol := range spec.Tolerations {
		if tol.Key != "nvidia.com/gpu" || tol.Effect != corev1.TaintEffectNoSchedule {
			t.Errorf("toleration %+v: only the nvidia.com/gpu NoSchedule taint is tolerated", tol)
		}
	}
	sc := c.SecurityContext
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("want readOnlyRootFilesystem: true and allowPrivilegeEscalation: false")
	}
	flags := map[string]string{}
	for _, a := range c.Args[1:] {
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		flags[name] = value
	}
	if (flags["token"] != "" || flags["token-file"] != "") && ds.Spec.Template.Annotations["prometheus.io/scrape"] == "true" {
		t.Error(`prometheus.io/scrape: "true" with a token: a scrape config that follows the annotation sends no token, and gets 401`)
	}
	limit := c.Resources.Limits.Memory().Value()
	var goLimit int64 = -1
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" {
			goLimit = goBytes(t, e.Value)
		}
	}
	if goLimit <= 0 || goLimit >= limit {
		t.Errorf("GOMEMLIMIT %d: want one under the memory limit, %d", goLimit, limit)
	}
	tmp := int64(-1)
	for _, v := range spec.Volumes {
		if m, ok := mounts[v.Name]; ok && m.MountPath == "/tmp" && v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil {
			tmp = v.EmptyDir.SizeLimit.Value()
		}
	}
	if n, err := strconv.ParseInt(flags["capture-max-bytes"], 10, 64); err != nil || tmp <= 0 || n >= tmp {
		t.Errorf("--capture-max-bytes %q and a /tmp of %d bytes: want a cap under /tmp's size limit", flags["capture-max-bytes"], tmp)
	}
	agent, err := os.ReadFile("../cmd/cudatap/agent.go")
	if err != nil {
		t.Fatal(err)
	}
	for name := range flags {
		if !bytes.Contains(agent, []byte(`"`+name+`"`)) {
			t.Errorf("--%s: the agent has no such flag", name)
		}
	}
	checkPort(t, flags["listen"], c)
}

// checkPort: the agent listens on metricsPort, its default, which the
// container declares (the probes use it by name).
func checkPort(t *testing.T, listen string, c corev1.Container) {
	t.Helper()
	if _, port, _ := strings.Cut(listen, ":"); port != strconv.Itoa(metricsPort) {
		t.Errorf("--listen %q: want port %d", listen, metricsPort)
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != metricsPort || c.Ports[0].Name != "metrics" {
		t.Errorf("container ports %v: want metrics, %d", c.Ports, metricsPort)
	}
	src, err := os.ReadFile("../internal/agent/agent.go")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(fmt.Sprintf(`DefaultListen\s*=\s*"127\.0\.0\.1:%d"`, metricsPort)).Match(src) {
		t.Errorf("the agent's default port is not %d (internal/agent.DefaultListen)", metricsPort)
	}
}

// goBytes parses a Go memory limit ("200MiB", as GOMEMLIMIT takes it).
func goBytes(t *testing.T, s string) int64 {
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"B", 0}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Errorf("GOMEMLIMIT %q: %v", s, err)
			}
			return n << u.shift
		}
	}
	t.Errorf("GOMEMLIMIT %q: want a number of B, KiB, MiB or GiB", s)
	return -1
}

// checkNetwork: the agent's pods take connections on the metrics port only
// and open none.
func checkNetwork(t *testing.T, np *networkingv1.NetworkPolicy) {
	t.Helper()
	if np.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"] != "cudatap-agent" {
		t.Errorf("the NetworkPolicy selects %v, not the agent's pods", np.Spec.PodSelector.MatchLabels)
	}
	types := map[networkingv1.PolicyType]bool{}
	for _, p := range np.Spec.PolicyTypes {
		types[p] = true
	}
	if !types[networkingv1.PolicyTypeEgress] || len(np.Spec.Egress) != 0 {
		t.Errorf("egress %v (policy types %v): want none allowed", np.Spec.Egress, np.Spec.PolicyTypes)
	}
	if !types[networkingv1.PolicyTypeIngress] || len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].Ports) != 1 || np.Spec.Ingress[0].Ports[0].Port.IntValue() != metricsPort {
		t.Errorf("ingress %v: want the metrics port, %d, alone", np.Spec.Ingress, metricsPort)
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
	for _, dir := range []string{"../internal/agent", "../export/metrics"} {
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

// dashboard is what the tests read of dashboard.json.
type dashboard struct {
	Templating struct {
		List []struct {
			Name, Query, AllValue string
		}
	}
	Panels []struct {
		Title   string
		Targets []struct{ Expr string }
	}
}

// TestDashboard: every panel filters every cudatap series it shows by the
// node, namespace and pod variables (the agent's own series by the node:
// they belong to no pod of the workloads), each variable's All matches an
// empty label too (a GPU no pod holds, a process outside Kubernetes), a
// panel shows the NCCL ranks, and promtool parses every query.
func TestDashboard(t *testing.T) {
	data, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	filters := map[string]string{"node": `Hostname=~"$node"`, "namespace": `namespace=~"$namespace"`, "pod": `pod=~"$pod"`}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		if _, ok := filters[v.Name]; ok {
			vars[v.Name] = true
			if v.AllValue != ".*" {
				t.Errorf("variable %s: All is %q, want .* (series with the label empty)", v.Name, v.AllValue)
			}
		}
	}
	if len(vars) != len(filters) {
		t.Errorf("variables %v: want node, namespace and pod", vars)
	}
	selector := regexp.MustCompile(`(cudatap_[a-z0-9_]+)(\{[^}]*\})?`)
	var exprs []string
	nccl := false
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			exprs = append(exprs, q.Expr)
			for _, m := range selector.FindAllStringSubmatch(q.Expr, -1) {
				name, labels := m[1], m[2]
				nccl = nccl || strings.HasPrefix(name, "cudatap_nccl_comm_")
				for v, f := range filters {
					if v != "node" && strings.HasPrefix(name, "cudatap_agent_") {
						continue // the agent's own series: no pod
					}
					if !strings.Contains(labels, f) {
						t.Errorf("panel %q: %s%s is not filtered by $%s", p.Title, name, labels, v)
					}
				}
			}
		}
	}
	if !nccl {
		t.Error("no panel shows the NCCL ranks (cudatap_nccl_comm_*), which the alerts watch")
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI needs promtool (Debian's prometheus package; make test-deps installs it)")
		}
		t.Skip("no promtool: the queries are not parsed (make test-deps installs it)")
	}
	// The queries as recording rules, Grafana's variables put in.
	vals := strings.NewReplacer("$node", ".*", "$namespace", ".*", "$pod", ".*", "$__rate_interval", "1m")
	rules := "groups:\n  - name: dashboard\n    rules:\n"
	for i, e := range exprs {
		q, _ := json.Marshal(vals.Replace(e))
		rules += fmt.Sprintf("      - record: dashboard_query_%d\n        expr: %s\n", i, q)
	}
	path := filepath.Join(t.TempDir(), "queries.yaml")
	if err := os.WriteFile(path, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("the dashboard's queries: promtool check rules: %v\n%s", err, out)
	}
}
