package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/cudatap/cudatap/internal/flight"
)

// The flight recorder (--flight-recorder): every traced process's last
// seconds kept in memory, dumped when a trigger fires (internal/flight).
// The agent hands it the session's records and calls, NVML's samples and
// events, and the dumps asked for: POST /dump and SIGUSR2.

// dumpTimeout bounds how long POST /dump waits for its dump to be written.
const dumpTimeout = time.Minute

// newFlight makes the agent's flight recorder (nil when off).
func (a *Agent) newFlight() error {
	o := a.o
	if o.FlightRecorder <= 0 {
		return nil
	}
	r, err := flight.New(flight.Options{Window: o.FlightRecorder, MaxBytes: o.FlightMaxBytes, HostMaxBytes: o.FlightHostMaxBytes, Dir: o.DumpsDir, DirMaxBytes: o.DumpsMaxBytes,
		SyncAfter: o.FlightSync, NCCLAfter: o.FlightNCCL, Cooldown: o.FlightCooldown, Version: o.Version, Logger: a.log})
	if err != nil {
		return err
	}
	a.flight = r
	a.series.MustRegister(r.Collector())
	return nil
}

// dumpOnSIGUSR2 dumps every traced process at each SIGUSR2, until ctx ends.
func (a *Agent) dumpOnSIGUSR2(ctx context.Context) {
	usr2 := make(chan os.Signal, 1)
	signal.Notify(usr2, syscall.SIGUSR2)
	go func() {
		defer signal.Stop(usr2)
		for {
			select {
			case <-ctx.Done():
				return
			case <-usr2:
				dctx, cancel := context.WithTimeout(ctx, dumpTimeout)
				if res, err := a.flight.Dump(dctx, nil, "SIGUSR2"); err != nil {
					a.log.Warn("SIGUSR2: no dump", "err", err)
				} else {
					a.log.Info("SIGUSR2: dump written", "path", res.Path, "report", res.Report)
				}
				cancel()
			}
		}
	}()
}

// dumper serves POST /dump?pid=N (every traced process without pid): a
// dump of the flight recorder's window, answered once written with where
// it is (JSON).
type dumper struct{ a *Agent }

// DumpAnswer is what POST /dump answers (cudatap dump prints it).
type DumpAnswer struct {
	Trigger  string   `json:"trigger"`
	Detail   string   `json:"detail"`
	PIDs     []uint32 `json:"pids"`
	Path     string   `json:"path"`
	Report   string   `json:"report,omitempty"`
	Bytes    int64    `json:"bytes"`
	Events   uint64   `json:"events"`
	Restated uint64   `json:"restated"`
	Dropped  uint64   `json:"dropped"`
}

func (d dumper) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "POST /dump?pid=N (or every traced process without pid)", http.StatusMethodNotAllowed)
		return
	}
	if d.a.flight == nil {
		http.Error(w, "this agent runs without the flight recorder: start it with --flight-recorder 30s", http.StatusNotFound)
		return
	}
	var pids []uint32
	if s := r.URL.Query().Get("pid"); s != "" {
		pid, err := strconv.ParseUint(s, 10, 32)
		if err != nil || pid == 0 {
			http.Error(w, fmt.Sprintf("pid %q: want a process id", s), http.StatusBadRequest)
			return
		}
		pids = []uint32{uint32(pid)}
	}
	ctx, cancel := context.WithTimeout(r.Context(), dumpTimeout)
	defer cancel()
	res, err := d.a.flight.Dump(ctx, pids, "POST /dump")
	switch {
	case errors.Is(err, flight.ErrNotTraced):
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	case errors.Is(err, context.DeadlineExceeded):
		http.Error(w, err.Error(), http.StatusGatewayTimeout)
		return
	case err != nil:
		http.Error(w, "the dump could not be written: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(DumpAnswer{Trigger: res.Trigger, Detail: res.Detail, PIDs: res.PIDs, Path: res.Path, Report: res.Report,
		Bytes: res.Bytes, Events: res.Events, Restated: res.Restated, Dropped: res.Dropped})
}
