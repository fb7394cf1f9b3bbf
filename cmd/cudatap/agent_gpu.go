package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/cudatap/cudatap/export/metrics"
	"github.com/cudatap/cudatap/tracer/nvml"
)

// nvmlRetry is how long the agent waits before trying NVML again after it
// was absent or stopped answering (a driver being upgraded, a GPU lost).
const nvmlRetry = time.Minute

// watchGPUs samples the node's GPUs into c for as long as ctx lives. NVML
// absent or failing leaves the agent running: cudatap_agent_nvml_up says
// 0, the reason is logged once per change, and it tries again.
func watchGPUs(ctx context.Context, c *metrics.GPUCollector, interval time.Duration, log *slog.Logger) {
	lastErr := ""
	for {
		s, err := nvml.New(nvml.Options{Interval: interval, OnEvent: c.Event, Logger: log})
		if err == nil {
			c.SetUp(true)
			if lastErr != "" {
				log.Info("NVML answers again: GPU series exported")
			}
			lastErr = ""
			s.Run(ctx, c.Add) // until ctx ends
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
