package kube

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// kubelet is a pod-resources server on a unix socket: the generated
// service, served by gRPC, answering what the test sets.
type kubelet struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	mu    sync.Mutex
	pods  []*podresourcesv1.PodResources
	err   error
	calls int
}

func (k *kubelet) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls++
	if k.err != nil {
		return nil, k.err
	}
	return &podresourcesv1.ListPodResourcesResponse{PodResources: k.pods}, nil
}

func (k *kubelet) set(pods []*podresourcesv1.PodResources, err error) {
	k.mu.Lock()
	k.pods, k.err = pods, err
	k.mu.Unlock()
}

func (k *kubelet) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.calls
}

// serve starts k on a unix socket at path. Listen binds before it
// returns, so a client can connect at once; Serve accepts from then on.
func serve(t *testing.T, path string, k *kubelet) {
	t.Helper()
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(s, k)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
}

func podRes(namespace, name string, containers ...*podresourcesv1.ContainerResources) *podresourcesv1.PodResources {
	return &podresourcesv1.PodResources{Namespace: namespace, Name: name, Containers: containers}
}

func ctr(name string, gpus ...string) *podresourcesv1.ContainerResources {
	c := &podresourcesv1.ContainerResources{Name: name}
	if len(gpus) > 0 {
		c.Devices = []*podresourcesv1.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: gpus}}
	}
	return c
}

// records keeps the log records of a Resolver.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r)
	h.mu.Unlock()
	return nil
}
func (h *records) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *records) WithGroup(string) slog.Handler      { return h }

func (h *records) list() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slog.Record(nil), h.recs...)
}

// clock is a fake clock, moved by the test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type fixture struct {
	r       *Resolver
	clock   *clock
	logs    *records
	socket  string
	procDir string // the fake /proc
}

func newFixture(t *testing.T) *fixture {
	dir := t.TempDir()
	f := &fixture{
		clock:   &clock{t: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		logs:    &records{},
		socket:  filepath.Join(dir, "kubelet.sock"),
		procDir: filepath.Join(dir, "proc"),
	}
	f.r = NewResolver(f.socket, slog.New(f.logs))
	f.r.procRoot = f.procDir
	f.r.now = f.clock.now
	mkdirs(t, filepath.Join(f.procDir, "1/ns"))
	if err := os.Symlink("uts:[4026531838]", filepath.Join(f.procDir, "1/ns/uts")); err != nil {
		t.Fatal(err)
	}
	return f
}

func mkdirs(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, name, content string) {
	t.Helper()
	mkdirs(t, filepath.Dir(name))
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A process as /proc shows it.
type fakeProc struct {
	podUID      string // "" when not in a pod
	containerID string
	hostname    string // its /etc/hostname, none when ""
	namespace   string // its service account's namespace, none when ""
	hostUTS     bool   // in the node's UTS namespace (host network)
}

func (f *fixture) proc(t *testing.T, pid uint32, p fakeProc) {
	t.Helper()
	dir := filepath.Join(f.procDir, fmt.Sprint(pid))
	cg := "0::/user.slice/user-1000.slice/session-3.scope\n"
	switch {
	case p.podUID != "":
		u := strings.ReplaceAll(p.podUID, "-", "_")
		cg = "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + u +
			".slice/cri-containerd-" + p.containerID + ".scope\n"
	case p.containerID != "":
		cg = "0::/system.slice/docker-" + p.containerID + ".scope\n"
	}
	write(t, filepath.Join(dir, "cgroup"), cg)
	mkdirs(t, filepath.Join(dir, "root/etc"))
	if p.hostname != "" {
		write(t, filepath.Join(dir, "root/etc/hostname"), p.hostname+"\n")
	}
	if p.namespace != "" {
		write(t, filepath.Join(dir, "root/var/run/secrets/kubernetes.io/serviceaccount/namespace"), p.namespace)
	}
	uts := fmt.Sprintf("uts:[%d]", 4026532000+pid)
	if p.hostUTS {
		uts = "uts:[4026531838]"
	}
	mkdirs(t, filepath.Join(dir, "ns"))
	if err := os.Symlink(uts, filepath.Join(dir, "ns/uts")); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) exit(t *testing.T, pid uint32) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(f.procDir, fmt.Sprint(pid))); err != nil {
		t.Fatal(err)
	}
}

const (
	uidTrainer = "1f2e3d4c-5b6a-7980-1a2b-3c4d5e6f7a8b"
	uidSolo    = "2f2e3d4c-5b6a-7980-1a2b-3c4d5e6f7a8b"
	uidHostNet = "3f2e3d4c-5b6a-7980-1a2b-3c4d5e6f7a8b"
	uidFresh   = "4f2e3d4c-5b6a-7980-1a2b-3c4d5e6f7a8b"
	uidLong    = "5f2e3d4c-5b6a-7980-1a2b-3c4d5e6f7a8b"
)

func cid(n int) string { return fmt.Sprintf("%064x", n) }

// longName is a pod name over 63 bytes whose cut ends in '-'.
var longName = strings.Repeat("a", 62) + "-bc"

func nodePods() []*podresourcesv1.PodResources {
	return []*podresourcesv1.PodResources{
		podRes("ml", "trainer-0", ctr("main", "GPU-aaa"), ctr("sidecar")),
		podRes("other", "trainer-0", ctr("main")), // same name, another namespace
		podRes("ml", "solo", ctr("only")),
		podRes("ml", "shared-a", ctr("c", "GPU-bbb::0")),
		podRes("ml", "shared-b", ctr("c", "GPU-bbb::1")),
		podRes("ml", "mig-old", ctr("c", "MIG-GPU-ccc/1/0")),
		podRes("ml", "mig-new", ctr("c", "MIG-ddd")),
		podRes("ml", longName, ctr("x"), ctr("y", "GPU-eee")),
		podRes("kube-system", "net", ctr("a"), ctr("b")),
	}
}

func TestDevice(t *testing.T) {
	f := newFixture(t)
	k := &kubelet{pods: nodePods()}
	serve(t, f.socket, k)
	for _, tc := range []struct {
		uuid string
		want Labels
	}{
		{"GPU-aaa", Labels{"ml", "trainer-0", "main"}},
		{"GPU-bbb", Labels{}}, // time-sliced between two pods: no single owner
		{"GPU-ccc", Labels{"ml", "mig-old", "c"}},
		{"MIG-GPU-ccc/1/0", Labels{"ml", "mig-old", "c"}},
		{"MIG-ddd", Labels{"ml", "mig-new", "c"}},
		{"GPU-eee", Labels{"ml", longName, "y"}},
		{"GPU-zzz", Labels{}},
	} {
		if got := f.r.Device(tc.uuid); got != tc.want {
			t.Errorf("Device(%q) = %+v, want %+v", tc.uuid, got, tc.want)
		}
	}
	if n := k.count(); n != 1 {
		t.Errorf("%d List calls within the refresh period, want 1", n)
	}
	f.clock.advance(refreshEvery)
	k.set(nil, nil) // the pods are gone
	if got := f.r.Device("GPU-aaa"); got != (Labels{}) {
		t.Errorf("Device after the pods left = %+v, want none", got)
	}
	if n := k.count(); n != 2 {
		t.Errorf("%d List calls after the refresh period, want 2", n)
	}
	for _, r := range f.logs.list() {
		t.Errorf("unexpected log: %s", r.Message)
	}
}

// procs makes the processes of TestProcess, one of each kind.
func procs(t *testing.T, f *fixture) {
	f.proc(t, 100, fakeProc{podUID: uidTrainer, containerID: cid(100), hostname: "trainer-0", namespace: "ml"})
	f.proc(t, 101, fakeProc{podUID: uidSolo, containerID: cid(101), hostname: "solo"}) // no service account
	f.proc(t, 102, fakeProc{containerID: cid(102)})                                    // docker, no Kubernetes
	f.proc(t, 103, fakeProc{})                                                         // on the host
	f.proc(t, 104, fakeProc{podUID: uidHostNet, containerID: cid(104), hostname: "node-7", hostUTS: true, namespace: "kube-system"})
	f.proc(t, 105, fakeProc{podUID: uidFresh, containerID: cid(105), hostname: "fresh", namespace: "ml"}) // not listed yet
	f.proc(t, 106, fakeProc{podUID: uidLong, containerID: cid(106), hostname: podHostname(longName), namespace: "ml"})
	f.proc(t, 107, fakeProc{podUID: uidTrainer, containerID: cid(107), namespace: "ml"}) // /etc/hostname unreadable
}

func TestProcess(t *testing.T) {
	f := newFixture(t)
	serve(t, f.socket, &kubelet{pods: nodePods()})
	procs(t, f)
	for _, tc := range []struct {
		name string
		pid  uint32
		gpus []string
		want Labels
	}{
		{"two containers, GPU unknown", 100, nil, Labels{"ml", "trainer-0", cid(100)}},
		{"two containers, GPU names one", 100, []string{"GPU-zzz", "GPU-aaa"}, Labels{"ml", "trainer-0", "main"}},
		{"unique name, no namespace file", 101, nil, Labels{"ml", "solo", "only"}},
		{"docker", 102, nil, Labels{Container: cid(102)}},
		{"host", 103, nil, Labels{}},
		{"host network: hostname is the node's", 104, nil, Labels{"kube-system", uidHostNet, cid(104)}},
		{"not in the list: its own view", 105, []string{"GPU-aaa"}, Labels{"ml", "fresh", cid(105)}},
		{"name over 63 bytes", 106, []string{"GPU-eee"}, Labels{"ml", longName, "y"}},
		{"no hostname: pod UID", 107, nil, Labels{"ml", uidTrainer, cid(107)}},
		{"no such process", 999, nil, Labels{}},
	} {
		if got := f.r.Process(tc.pid, tc.gpus...); got != tc.want {
			t.Errorf("%s: Process(%d, %q) = %+v, want %+v", tc.name, tc.pid, tc.gpus, got, tc.want)
		}
	}
	if _, ok := f.r.procs[999]; ok {
		t.Error("a process that does not exist was cached")
	}
}

func TestNoKubelet(t *testing.T) {
	f := newFixture(t)
	procs(t, f)
	for range 100 {
		if got := f.r.Device("GPU-aaa"); got != (Labels{}) {
			t.Fatalf("Device without a kubelet = %+v", got)
		}
		if got, want := f.r.Process(100, "GPU-aaa"), (Labels{"ml", "trainer-0", cid(100)}); got != want {
			t.Fatalf("Process without a kubelet = %+v, want %+v (its own view)", got, want)
		}
		f.clock.advance(time.Minute)
	}
	recs := f.logs.list()
	if len(recs) != 1 || recs[0].Level != slog.LevelDebug {
		for _, r := range recs {
			t.Logf("%s %s", r.Level, r.Message)
		}
		t.Fatalf("%d log records, want one at debug level", len(recs))
	}

	// The kubelet starts: the next try, within maxBackoff, finds it.
	k := &kubelet{pods: nodePods()}
	serve(t, f.socket, k)
	f.clock.advance(maxBackoff)
	if got, want := f.r.Process(100, "GPU-aaa"), (Labels{"ml", "trainer-0", "main"}); got != want {
		t.Errorf("Process once the kubelet answers = %+v, want %+v", got, want)
	}
	if k.count() != 1 {
		t.Errorf("%d List calls, want 1", k.count())
	}
}

// A socket file nobody listens on fails the call, it does not hang it.
func TestDeadSocket(t *testing.T) {
	f := newFixture(t)
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: f.socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	lis.SetUnlinkOnClose(false)
	lis.Close()
	if got := f.r.Device("GPU-aaa"); got != (Labels{}) {
		t.Errorf("Device = %+v, want none", got)
	}
	if f.r.failures != 1 {
		t.Errorf("%d failures recorded, want 1", f.r.failures)
	}
}

func TestListErrorBackoff(t *testing.T) {
	f := newFixture(t)
	k := &kubelet{err: status.Error(codes.Unavailable, "kubelet restarting")}
	serve(t, f.socket, k)
	procs(t, f)
	ask := func(wantCalls int, want Labels) {
		t.Helper()
		if got := f.r.Device("GPU-aaa"); got != want {
			t.Errorf("Device = %+v, want %+v", got, want)
		}
		if n := k.count(); n != wantCalls {
			t.Errorf("%d List calls, want %d", n, wantCalls)
		}
	}
	ask(1, Labels{})
	f.clock.advance(refreshEvery - time.Second)
	ask(1, Labels{}) // the failure is remembered
	f.clock.advance(time.Second)
	ask(2, Labels{})
	f.clock.advance(2*refreshEvery - time.Second) // the wait doubled
	ask(2, Labels{})
	f.clock.advance(time.Second)
	ask(3, Labels{})

	k.set(nodePods(), nil)
	f.clock.advance(4 * refreshEvery)
	ask(4, Labels{"ml", "trainer-0", "main"})
	f.clock.advance(refreshEvery - time.Second)
	ask(4, Labels{"ml", "trainer-0", "main"}) // cached

	// The kubelet fails again: its last list is used for keepStale, then
	// dropped; the processes' view stays.
	k.set(nil, status.Error(codes.Internal, "boom"))
	listed := f.clock.now().Add(-(refreshEvery - time.Second))
	f.clock.advance(time.Second)
	ask(5, Labels{"ml", "trainer-0", "main"})
	for f.clock.now().Sub(listed) < keepStale {
		f.clock.advance(f.r.next.Sub(f.clock.now()))
		f.r.Device("GPU-aaa")
	}
	ask(k.count(), Labels{})
	if got, want := f.r.Process(100, "GPU-aaa"), (Labels{"ml", "trainer-0", cid(100)}); got != want {
		t.Errorf("Process after the list went stale = %+v, want %+v", got, want)
	}

	var debug int
	for _, r := range f.logs.list() {
		if r.Level != slog.LevelDebug {
			t.Errorf("log at %s: %s", r.Level, r.Message)
		}
		debug++
	}
	// failing, answering again, failing again
	if debug != 3 {
		t.Errorf("%d log records, want 3", debug)
	}
}

func TestBackoff(t *testing.T) {
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 5 * time.Minute, 5 * time.Minute}
	for i, w := range want {
		if got := backoff(i + 1); got != w {
			t.Errorf("backoff(%d) = %v, want %v", i+1, got, w)
		}
	}
	if got := backoff(1000); got != maxBackoff {
		t.Errorf("backoff(1000) = %v", got)
	}
}

func TestProcessCacheBound(t *testing.T) {
	f := newFixture(t)
	f.r.maxProcs = 4
	for pid := uint32(200); pid < 210; pid++ {
		f.proc(t, pid, fakeProc{containerID: cid(int(pid))})
		f.r.Process(pid)
		if n := len(f.r.procs); n > 4 {
			t.Fatalf("%d processes cached, bound 4", n)
		}
	}
	for pid := uint32(206); pid < 210; pid++ {
		if f.r.procs[pid] == nil {
			t.Errorf("recently asked pid %d evicted", pid)
		}
	}

	// Exited processes make room before the least recently asked do.
	f.r.Process(206) // 207 is now the least recently asked
	f.exit(t, 208)
	f.exit(t, 209)
	f.proc(t, 210, fakeProc{})
	f.r.Process(210)
	for _, pid := range []uint32{206, 207, 210} {
		if f.r.procs[pid] == nil {
			t.Errorf("live pid %d evicted while exited ones were cached", pid)
		}
	}
	if len(f.r.procs) != 3 {
		t.Errorf("%d processes cached, want 3", len(f.r.procs))
	}

	// Exited processes are swept every refreshEvery, full or not.
	f.exit(t, 206)
	f.clock.advance(refreshEvery)
	f.r.Device("GPU-aaa")
	if f.r.procs[206] != nil {
		t.Error("exited pid 206 still cached after a sweep")
	}
}

// A process's view is read again after viewTTL: a pid can be reused.
func TestProcessViewExpires(t *testing.T) {
	f := newFixture(t)
	f.proc(t, 300, fakeProc{podUID: uidSolo, containerID: cid(300), hostname: "first", namespace: "ml"})
	if got := f.r.Process(300); got.Pod != "first" {
		t.Fatalf("Process = %+v", got)
	}
	f.exit(t, 300)
	f.proc(t, 300, fakeProc{podUID: uidSolo, containerID: cid(301), hostname: "second", namespace: "ml"})
	f.clock.advance(viewTTL - time.Second)
	if got := f.r.Process(300); got.Pod != "first" {
		t.Errorf("Process within viewTTL = %+v, want the cached view", got)
	}
	f.clock.advance(time.Second)
	if got, want := f.r.Process(300), (Labels{"ml", "second", cid(301)}); got != want {
		t.Errorf("Process after viewTTL = %+v, want %+v", got, want)
	}
	f.exit(t, 300)
	f.clock.advance(viewTTL)
	if got := f.r.Process(300); got != (Labels{}) {
		t.Errorf("Process of an exited pid = %+v, want none", got)
	}
	if f.r.procs[300] != nil {
		t.Error("exited pid still cached")
	}
}

// What a container writes in its files stays inside it: absolute links
// resolve in its root, FIFOs do not block, and junk is not a label.
func TestReadInRoot(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "inside"), "inside\n")
	mkdirs(t, filepath.Join(root, "etc"))
	link := func(target, name string) {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	link("/inside", "etc/abs")
	link("../../../../../../../../inside", "etc/up")
	link("/etc/hostname", "etc/hostname") // the agent's, were it resolved outside
	if err := syscall.Mkfifo(filepath.Join(root, "etc/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(root, "etc/upper"), "Trainer-0\n")
	write(t, filepath.Join(root, "etc/utf8"), "tr\xffiner\n")
	write(t, filepath.Join(root, "etc/long"), strings.Repeat("a", 254))
	write(t, filepath.Join(root, "etc/max"), strings.Repeat("a", 253)+"\n")
	mkdirs(t, filepath.Join(root, "run/secrets"))
	write(t, filepath.Join(root, "run/secrets/ns"), "ml")
	link("/run", "var")

	for _, tc := range []struct{ rel, want string }{
		{"inside", "inside"},
		{"etc/abs", "inside"},
		{"etc/up", "inside"},
		{"etc/hostname", ""}, // a loop within root, not the agent's file
		{"etc/fifo", ""},
		{"etc/upper", ""},
		{"etc/utf8", ""},
		{"etc/long", ""},
		{"etc/max", strings.Repeat("a", 253)},
		{"var/secrets/ns", "ml"}, // /var → /run inside root
		{"missing", ""},
	} {
		if got := readInRoot(root, tc.rel); got != tc.want {
			t.Errorf("readInRoot(%q) = %q, want %q", tc.rel, got, tc.want)
		}
	}
}

// A list over gRPC's default 4 MiB limit is read.
func TestLargeList(t *testing.T) {
	f := newFixture(t)
	var pods []*podresourcesv1.PodResources
	for i := range 20000 {
		pods = append(pods, podRes("ns", fmt.Sprintf("%0200d", i), ctr("c", fmt.Sprintf("GPU-%d", i))))
	}
	serve(t, f.socket, &kubelet{pods: pods})
	if got, want := f.r.Device("GPU-19999"), (Labels{"ns", fmt.Sprintf("%0200d", 19999), "c"}); got != want {
		t.Errorf("Device = %+v, want %+v; logs %v", got, want, f.logs.list())
	}
}

// Callers from several goroutines while the list is refreshed (for -race).
func TestConcurrent(t *testing.T) {
	f := newFixture(t)
	serve(t, f.socket, &kubelet{pods: nodePods()})
	procs(t, f)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				if g == 0 {
					f.clock.advance(refreshEvery)
				}
				f.r.Device("GPU-aaa")
				f.r.Process(uint32(100 + i%8))
			}
		})
	}
	wg.Wait()
	if got, want := f.r.Process(100, "GPU-aaa"), (Labels{"ml", "trainer-0", "main"}); got != want {
		t.Errorf("Process = %+v, want %+v", got, want)
	}
}

// TestWatch: under Watch, lookups answer from the list Watch fetched and
// never wait for the kubelet, even when it hangs.
func TestWatch(t *testing.T) {
	f := newFixture(t)
	k := &kubelet{pods: nodePods()}
	serve(t, f.socket, k)
	ask := f.r.list
	hang := make(chan struct{})
	first := true // only Watch's goroutine asks
	f.r.list = func() (*index, error) {
		if !first {
			<-hang // the kubelet stops answering
		}
		first = false
		return ask()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	f.r.watched.Store(true) // as Watch does first, before its goroutine runs
	go func() { f.r.Watch(ctx); close(done) }()
	defer func() { close(hang); cancel(); <-done }()
	want := Labels{"ml", "trainer-0", "main"}
	for deadline := time.Now().Add(time.Minute); f.r.Device("GPU-aaa") != want; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Watch fetched no pod list within a minute")
		}
	}
	f.clock.advance(refreshEvery) // due again: Watch's next ask hangs
	if got := f.r.Device("GPU-aaa"); got != want {
		t.Errorf("Device under Watch, the kubelet hanging = %+v, want the listed pod", got)
	}
	if n := k.count(); n != 1 {
		t.Errorf("%d List calls, want the one Watch made", n)
	}
}
