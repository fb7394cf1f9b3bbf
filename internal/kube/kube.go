// Package kube names the Kubernetes namespace, pod and container of a
// process, and of a GPU, for the agent's metric labels: the labels
// dcgm-exporter puts on its series (pod, namespace, container), so that
// dashboards written for one work with the other.
//
// Two sources, in order. The kubelet's pod-resources API (a gRPC service on
// a unix socket, the one dcgm-exporter asks) lists the pods of the node with
// their containers and the devices allocated to each: for nvidia.com/gpu the
// device ids are GPU (or MIG) UUIDs. A process's own view names its pod: a
// process in a pod (a pod UID in its cgroup path) has the pod name as its
// /etc/hostname and, when a service account is mounted, its namespace in
// /var/run/secrets/kubernetes.io/serviceaccount/namespace; both are read
// through /proc/PID/root. The list confirms the view and adds the container
// name; without the list (most nodes are not Kubernetes, and the socket
// must be mounted into the agent's pod), the view alone names the pod.
//
// Nothing here is an error for the caller: a label that cannot be found is
// "", or the fallback documented on Labels.
package kube

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/internal/procfs"
)

// DefaultSocket is where the kubelet serves the pod-resources API.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// MaxProcesses bounds the processes whose view a Resolver keeps.
const MaxProcesses = 4096

const (
	// refreshEvery is the age at which the pod list is asked again, and the
	// first wait after a failure; failures double the wait up to maxBackoff.
	refreshEvery = 10 * time.Second
	maxBackoff   = 5 * time.Minute
	// keepStale is how long a pod list is used after the API stopped
	// answering (a kubelet restart), before labels fall back to the
	// processes' view: the pods of a node change, and a stale list would
	// name a GPU's previous pod.
	keepStale = time.Minute
	// viewTTL is how long a process's view is used before it is read again
	// (a pid can be reused by another process).
	viewTTL = refreshEvery
)

// Labels name where a process or a GPU belongs. Fallbacks, for a
// process: in a pod that neither the pod list nor its own view names, Pod
// is the pod UID from its cgroup path; in a container (in a pod or not)
// whose name is not found, Container is the container id from its cgroup
// path. These are the values the agent's pod and container labels had
// before names were looked up, so existing series keep one.
type Labels struct {
	Namespace, Pod, Container string
}

// A Resolver answers Labels for processes and GPUs of this node. It is
// safe for concurrent use.
type Resolver struct {
	socket   string
	log      *slog.Logger
	procRoot string                 // "/proc"; a fake tree in tests
	now      func() time.Time       // time.Now; a fake clock in tests
	list     func() (*index, error) // the pod-resources API
	maxProcs int

	// watched: Watch refreshes the pod list; lookups never wait for it.
	watched atomic.Bool

	mu        sync.Mutex
	idx       *index // nil: no pod list
	listedAt  time.Time
	next      time.Time // when the pod list may be asked again
	failures  int       // consecutive failed asks
	listing   bool      // an ask is under way, without mu
	nextSweep time.Time
	procs     map[uint32]*procEntry
	seq       uint64
}

// view is what a process shows of itself.
type view struct {
	podUID, containerID string // from its cgroup path
	hostname            string // its /etc/hostname, "" when it is the node's (host UTS namespace)
	namespace           string // its service account's namespace
}

type procEntry struct {
	view   view
	readAt time.Time
	used   uint64 // Resolver.seq at the last lookup
}

// NewResolver returns a Resolver that asks the pod-resources API at socket
// (DefaultSocket on a standard kubelet). It connects on demand, at most
// every 10 s; an absent or failing socket is logged once at debug level and
// tried again after a growing wait, up to 5 minutes. The ask runs in the
// Process or Device call that finds it due, for at most 2 s (other callers
// meanwhile answer from the list there is): keep these calls off paths that
// must not wait. log may be nil.
func NewResolver(socket string, log *slog.Logger) *Resolver {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Resolver{
		socket:   socket,
		log:      log,
		procRoot: "/proc",
		now:      time.Now,
		maxProcs: MaxProcesses,
		procs:    map[uint32]*procEntry{},
	}
	r.list = func() (*index, error) { return listPods(socket) }
	return r
}

// Device is the pod and container the kubelet allocated the GPU (or MIG
// device) with this UUID to, and their namespace; empty when it is
// allocated to none, or to several (time-slicing), or when the pod list is
// unavailable.
func (r *Resolver) Device(uuid string) Labels {
	r.refreshInline()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.idx == nil {
		return Labels{}
	}
	return r.idx.device(uuid)
}

// Process is where process pid (in this PID namespace) belongs. gpus are
// the UUIDs of GPUs the caller knows it uses, if any: in a pod of several
// containers they name its container, the one allocated one of them. A
// process that has exited has no labels: a caller that exports a process
// after its exit keeps the labels it got while the process ran.
func (r *Resolver) Process(pid uint32, gpus ...string) Labels {
	r.refreshInline()
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	r.seq++
	e := r.procs[pid]
	if e == nil || now.Sub(e.readAt) >= viewTTL {
		v, alive := r.readView(pid)
		switch {
		case !alive:
			delete(r.procs, pid)
			return Labels{}
		case e != nil:
			e.view, e.readAt = v, now
		default:
			e = &procEntry{view: v, readAt: now}
			r.insert(pid, e)
		}
	}
	e.used = r.seq
	return r.labels(e.view, gpus)
}

func (r *Resolver) labels(v view, gpus []string) Labels {
	if v.podUID == "" {
		return Labels{Container: v.containerID}
	}
	if r.idx != nil {
		if p := r.idx.pod(v.namespace, v.hostname); p != nil {
			l := Labels{Namespace: p.namespace, Pod: p.name, Container: p.container(gpus)}
			if l.Container == "" {
				l.Container = v.containerID
			}
			return l
		}
	}
	l := Labels{Namespace: v.namespace, Pod: v.hostname, Container: v.containerID}
	if l.Pod == "" {
		l.Pod = v.podUID
	}
	return l
}

// insert adds an entry, making room first: entries of exited processes go,
// then, if the map is still full, the least recently asked one.
func (r *Resolver) insert(pid uint32, e *procEntry) {
	if len(r.procs) >= r.maxProcs {
		r.sweep()
	}
	if len(r.procs) >= r.maxProcs {
		oldest, at := uint32(0), ^uint64(0)
		for id, p := range r.procs {
			if p.used < at {
				oldest, at = id, p.used
			}
		}
		delete(r.procs, oldest)
	}
	r.procs[pid] = e
}

// sweep drops the entries of processes that have exited.
func (r *Resolver) sweep() {
	for pid := range r.procs {
		if _, err := os.Lstat(r.pidDir(pid)); errors.Is(err, fs.ErrNotExist) {
			delete(r.procs, pid)
		}
	}
}

func (r *Resolver) pidDir(pid uint32) string {
	return filepath.Join(r.procRoot, strconv.FormatUint(uint64(pid), 10))
}

// refresh asks for the pod list when it is due, without holding mu during
// the call: meanwhile, other callers use the list there is. It also sweeps
// exited processes every refreshEvery.
// Watch keeps the pod list fresh from its own goroutine until ctx is done,
// so that Process and Device answer at once, from the list there is, and
// never wait for the kubelet (call it before the first lookup).
func (r *Resolver) Watch(ctx context.Context) {
	r.watched.Store(true)
	defer r.watched.Store(false)
	tick := time.NewTicker(time.Second) // refresh itself keeps to its pace
	defer tick.Stop()
	for {
		r.refresh()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// refreshInline refreshes the pod list in the caller's goroutine unless
// Watch does it.
func (r *Resolver) refreshInline() {
	if !r.watched.Load() {
		r.refresh()
	}
}

func (r *Resolver) refresh() {
	r.mu.Lock()
	now := r.now()
	if !now.Before(r.nextSweep) {
		r.sweep()
		r.nextSweep = now.Add(refreshEvery)
	}
	if r.listing || now.Before(r.next) {
		r.mu.Unlock()
		return
	}
	r.listing = true
	r.mu.Unlock()

	idx, err := r.list()

	r.mu.Lock()
	defer r.mu.Unlock()
	r.listing = false
	now = r.now()
	if err == nil {
		if r.failures > 0 {
			r.log.Debug("kubelet pod-resources API answers again", "socket", r.socket, "pods", len(idx.pods))
		}
		r.idx, r.listedAt, r.failures = idx, now, 0
		r.next = now.Add(refreshEvery)
		return
	}
	r.failures++
	if r.failures == 1 {
		// Once per run of failures: on most nodes there is no kubelet.
		r.log.Debug("kubelet pod-resources API unavailable: pod labels from the processes' own view",
			"socket", r.socket, "err", err)
	}
	r.next = now.Add(backoff(r.failures))
	if r.idx != nil && now.Sub(r.listedAt) >= keepStale {
		r.idx = nil
	}
}

// backoff is the wait after the n-th consecutive failure (n ≥ 1).
func backoff(n int) time.Duration {
	d := refreshEvery
	for i := 1; i < n && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

// readView reads what process pid shows of itself; alive is false when it
// has exited.
func (r *Resolver) readView(pid uint32) (v view, alive bool) {
	dir := r.pidDir(pid)
	cg, err := os.ReadFile(filepath.Join(dir, "cgroup"))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return view{}, false
	}
	if err != nil {
		return view{}, true
	}
	v.containerID, v.podUID = procfs.ContainerFromCgroup(string(cg))
	if v.podUID == "" {
		return v, true
	}
	root := filepath.Join(dir, "root")
	v.namespace = readInRoot(root, "var/run/secrets/kubernetes.io/serviceaccount/namespace")
	// A pod on the host network shares the node's UTS namespace, and its
	// /etc/hostname is the node's name, not the pod's.
	if !r.hostUTS(dir) {
		v.hostname = readInRoot(root, "etc/hostname")
	}
	return v, true
}

// hostUTS reports whether the process whose /proc directory is dir is in
// the UTS namespace of pid 1; false when either cannot be read.
func (r *Resolver) hostUTS(dir string) bool {
	ns, err1 := os.Readlink(filepath.Join(dir, "ns/uts"))
	host, err2 := os.Readlink(filepath.Join(r.procRoot, "1/ns/uts"))
	return err1 == nil && err2 == nil && ns == host
}

// maxValue bounds what readInRoot reads: a pod name is at most 253 bytes.
const maxValue = 256

// readInRoot is the trimmed content of the regular file rel, resolved with
// root as "/" (symlinks included: an absolute link in a container names a
// file of the container, not of the agent), "" when it cannot be read.
// Non-blocking: a FIFO planted in a container cannot hang the agent.
func readInRoot(root, rel string) string {
	dfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat2(dfd, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return "" // also ENOSYS before Linux 5.6: no view, the pod UID stays
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	b := make([]byte, maxValue+1)
	n, _ := io.ReadFull(f, b)
	return dnsName(strings.TrimSpace(string(b[:n])))
}

// dnsName is s when it can be a pod name, a hostname or a namespace (a DNS
// subdomain: lower-case letters, digits, '-' and '.', at most 253 bytes),
// else "": a container's files are its own to write, and a label value
// must at least be valid UTF-8.
func dnsName(s string) string {
	if s == "" || len(s) > 253 {
		return ""
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.') {
			return ""
		}
	}
	return s
}
