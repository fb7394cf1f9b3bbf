package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

const (
	callTimeout = 2 * time.Second
	// maxMsgSize is the largest List answer read, dcgm-exporter's limit
	// (gRPC's default, 4 MiB, is short on nodes of many pods).
	maxMsgSize = 16 << 20
)

// listPods asks the pod-resources API at socket for the pods of the node.
// A connection per ask: the asks are at least 10 s apart, and a kubelet
// restart recreates the socket.
func listPods(socket string) (*index, error) {
	if _, err := os.Stat(socket); err != nil {
		return nil, err // not a Kubernetes node, or the socket is not mounted
	}
	abs, err := filepath.Abs(socket)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("unix://"+abs,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize)))
	if err != nil {
		return nil, fmt.Errorf("pod-resources client for %s: %w", socket, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := podresourcesv1.NewPodResourcesListerClient(conn).List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("list pod resources at %s: %w", socket, err)
	}
	return newIndex(resp), nil
}

// index is a pod list, as Resolver looks things up in it. It is not
// changed once built.
type index struct {
	pods    []*pod
	byHost  map[string][]*pod   // the hostname a pod's containers get → pods, across namespaces
	devices map[string][]Labels // device id → the containers allocated it
}

type pod struct {
	namespace, name string
	containers      []container
}

type container struct {
	name    string
	devices []string // deviceKeys of its devices
}

func newIndex(resp *podresourcesv1.ListPodResourcesResponse) *index {
	x := &index{byHost: map[string][]*pod{}, devices: map[string][]Labels{}}
	for _, pr := range resp.GetPodResources() {
		p := &pod{namespace: pr.GetNamespace(), name: pr.GetName()}
		for _, cr := range pr.GetContainers() {
			c := container{name: cr.GetName()}
			l := Labels{Namespace: p.namespace, Pod: p.name, Container: c.name}
			for _, d := range cr.GetDevices() {
				for _, id := range d.GetDeviceIds() {
					for _, k := range deviceKeys(id) {
						c.devices = append(c.devices, k)
						if !contains(x.devices[k], l) {
							x.devices[k] = append(x.devices[k], l)
						}
					}
				}
			}
			p.containers = append(p.containers, c)
		}
		x.pods = append(x.pods, p)
		h := podHostname(p.name)
		x.byHost[h] = append(x.byHost[h], p)
	}
	return x
}

func contains[T comparable](s []T, v T) bool {
	for _, e := range s {
		if e == v {
			return true
		}
	}
	return false
}

// deviceKeys are the ids a device id is found by: itself, less a
// time-slicing replica suffix ("GPU-<uuid>::3"), and for a MIG device of
// the old form ("MIG-GPU-<uuid>/<gi>/<ci>") also its GPU's UUID. A MIG
// UUID of the current form ("MIG-<uuid>") does not name its GPU.
func deviceKeys(id string) []string {
	id, _, _ = strings.Cut(id, "::")
	if rest, ok := strings.CutPrefix(id, "MIG-GPU-"); ok {
		gpu, _, _ := strings.Cut(rest, "/")
		return []string{id, "GPU-" + gpu}
	}
	return []string{id}
}

// podHostname is the hostname the kubelet gives the containers of a pod
// named name that sets no spec.hostname: the name, cut to 63 bytes
// without a trailing '-' or '.'.
func podHostname(name string) string {
	if len(name) <= 63 {
		return name
	}
	return strings.TrimRight(name[:63], "-.")
}

// pod is the pod whose containers' hostname is hostname, in namespace
// (any when ""); nil when none or several are.
func (x *index) pod(namespace, hostname string) *pod {
	if hostname == "" {
		return nil
	}
	var found *pod
	for _, p := range x.byHost[hostname] {
		if namespace != "" && p.namespace != namespace {
			continue
		}
		if found != nil {
			return nil
		}
		found = p
	}
	return found
}

// container is the name of the pod's only container, or of the one
// container allocated one of gpus; "" when that does not name one.
func (p *pod) container(gpus []string) string {
	if len(p.containers) == 1 {
		return p.containers[0].name
	}
	found := ""
	for _, c := range p.containers {
		for _, g := range gpus {
			if contains(c.devices, g) {
				if found != "" && found != c.name {
					return ""
				}
				found = c.name
			}
		}
	}
	return found
}

// device is the one container allocated the device uuid; empty when none
// or several are.
func (x *index) device(uuid string) Labels {
	if h := x.devices[uuid]; len(h) == 1 {
		return h[0]
	}
	return Labels{}
}
