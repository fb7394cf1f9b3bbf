package agent

import (
	"context"
	"log/slog"
	"time"

	"github.com/cudatap/cudatap/export/metrics"
	"github.com/cudatap/cudatap/export/profilestore"
	"github.com/cudatap/cudatap/internal/flight"
	"github.com/cudatap/cudatap/internal/kube"
	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/nvml"
)

// nvmlRetry is how long the agent waits before trying NVML again after it
// was absent or stopped answering (a driver being upgraded, a GPU lost).
const nvmlRetry = time.Minute

// watchGPUs samples the node's GPUs into c (and the flight recorder fr,
// when on: Xids and throttles trigger its dumps) for as long as ctx lives.
// NVML absent or failing leaves the agent running: cudatap_agent_nvml_up
// says 0, the reason is logged once per change, and it tries again.
func watchGPUs(ctx context.Context, c *metrics.GPUCollector, fr *flight.Recorder, interval time.Duration, log *slog.Logger) {
	lastErr := ""
	onEvent, onSample := c.Event, c.Add
	if fr != nil {
		onEvent = func(e nvml.Event) { c.Event(e); fr.GPUEvent(e) }
		onSample = func(s nvml.Sample) { c.Add(s); fr.GPUSample(s) }
	}
	for {
		s, err := nvml.New(nvml.Options{Interval: interval, OnEvent: onEvent, Logger: log})
		if err == nil {
			c.SetUp(true)
			if lastErr != "" {
				log.Info("NVML answers again: GPU series exported")
			}
			lastErr = ""
			s.Run(ctx, onSample) // until ctx ends
			s.Close()
			c.SetUp(false)
		} else if err.Error() != lastErr {
			lastErr = err.Error()
			c.SetUp(false)
			log.Warn("GPU series not exported: NVML unavailable; retrying every minute", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(nvmlRetry):
		}
	}
}

// podLabels names processes and GPUs for the series and profiles: comm
// from /proc, pod, namespace and container through the kubelet's
// pod-resources API and the process's own view (internal/kube).
type podLabels struct{ r *kube.Resolver }

// newPodLabels asks the kubelet at socket ("": never) for as long as ctx
// lives.
func newPodLabels(ctx context.Context, socket string, log *slog.Logger) podLabels {
	r := kube.NewResolver(socket, log)
	if socket != "" {
		go r.Watch(ctx)
	}
	return podLabels{r}
}

func (p podLabels) process(pid uint32, gpus ...string) metrics.ProcLabels {
	l := p.r.Process(pid, gpus...)
	comm, _ := procfs.Comm(int(pid))
	return metrics.ProcLabels{Comm: comm, Container: l.Container, Pod: l.Pod, Namespace: l.Namespace}
}

func (p podLabels) device(uuid string) metrics.ProcLabels {
	l := p.r.Device(uuid)
	return metrics.ProcLabels{Container: l.Container, Pod: l.Pod, Namespace: l.Namespace}
}

// profile labels a window's profile of a process: what the model knew of
// it, with the pod's names where they are found.
func (p podLabels) profile(mp *model.Process) profilestore.Labels {
	l := profilestore.LabelsOf(mp)
	if k := p.r.Process(mp.PID); k != (kube.Labels{}) {
		l.Container, l.Pod, l.Namespace = k.Container, k.Pod, k.Namespace
	}
	return l
}
