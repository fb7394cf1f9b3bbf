// Package profilestore hands the agent's profiles to where platform teams
// keep them: one pprof per process per window, labelled by process,
// container and pod, written to a directory bounded by size and/or pushed
// to a Pyroscope-compatible ingest API (POST /ingest?name=…&format=pprof,
// multipart "profile" field, as Pyroscope, Grafana Alloy's
// pyroscope.receive_http and compatible stores accept it).
package profilestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/pprof/profile"

	"github.com/cudatap/cudatap/tracer/model"
)

// Labels identify one process's profile.
type Labels struct {
	PID                             uint32
	Comm, Container, Pod, Namespace string
}

// LabelsOf are a traced process's labels.
func LabelsOf(p *model.Process) Labels {
	return Labels{PID: p.PID, Comm: p.Info.Comm, Container: p.Info.Container, Pod: p.Info.PodUID}
}

// PerProcess splits a window's profile (its samples carry a pid label) into
// one profile per process that has samples, each with the labels of its
// process on every sample and in its comments: name's (LabelsOf when nil).
func PerProcess(p *profile.Profile, procs []*model.Process, name func(*model.Process) Labels) map[Labels]*profile.Profile {
	if name == nil {
		name = LabelsOf
	}
	out := map[Labels]*profile.Profile{}
	for _, proc := range procs {
		pid := strconv.FormatUint(uint64(proc.PID), 10)
		c := p.Copy()
		c.FilterSamplesByTag(func(s *profile.Sample) bool {
			return len(s.Label["pid"]) > 0 && s.Label["pid"][0] == pid
		}, nil)
		if len(c.Sample) == 0 {
			continue
		}
		l := name(proc)
		for _, s := range c.Sample {
			for k, v := range map[string]string{"comm": l.Comm, "container": l.Container, "pod": l.Pod, "namespace": l.Namespace} {
				if v != "" {
					s.Label[k] = []string{v}
				}
			}
		}
		c.Comments = append(c.Comments, fmt.Sprintf("pid=%d comm=%s container=%s pod=%s namespace=%s", l.PID, l.Comm, l.Container, l.Pod, l.Namespace))
		out[l] = c
	}
	return out
}

// Dir keeps profiles in a directory, at most MaxBytes of them: the oldest
// go first. Files are named cudatap-UNIXSECONDS-PID-COMM.pb.gz.
type Dir struct {
	path     string
	maxBytes int64
}

// OpenDir makes the directory if needed.
func OpenDir(path string, maxBytes int64) (*Dir, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("--profiles-max-bytes %d: want a positive size", maxBytes)
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, fmt.Errorf("profiles directory: %w", err)
	}
	return &Dir{path: path, maxBytes: maxBytes}, nil
}

// Write writes one profile, then removes the oldest until the directory's
// profiles fit MaxBytes (the one just written is always kept).
func (d *Dir) Write(l Labels, from time.Time, p *profile.Profile) (string, error) {
	name := fmt.Sprintf("cudatap-%d-%d-%s.pb.gz", from.Unix(), l.PID, safe(l.Comm))
	path := filepath.Join(d.path, name)
	tmp, err := os.CreateTemp(d.path, ".cudatap-*.tmp")
	if err != nil {
		return "", err
	}
	if err := p.Write(tmp); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return "", err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return path, d.rotate(path)
}

// rotate removes the oldest profiles beyond the size bound.
func (d *Dir) rotate(keep string) error {
	ents, err := os.ReadDir(d.path)
	if err != nil {
		return err
	}
	type file struct {
		path string
		size int64
		mod  time.Time
	}
	var files []file
	var total int64
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "cudatap-") || !strings.HasSuffix(e.Name(), ".pb.gz") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		files = append(files, file{filepath.Join(d.path, e.Name()), info.Size(), info.ModTime()})
		total += info.Size()
	}
	slices.SortFunc(files, func(a, b file) int {
		if c := a.mod.Compare(b.mod); c != 0 {
			return c
		}
		return strings.Compare(a.path, b.path)
	})
	for _, f := range files {
		if total <= d.maxBytes {
			break
		}
		if f.path == keep {
			continue
		}
		if err := os.Remove(f.path); err == nil || errors.Is(err, os.ErrNotExist) {
			total -= f.size
		}
	}
	return nil
}

// safe keeps a name to characters any file system and label value take.
func safe(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "process"
	}
	return string(b)
}

// Pusher sends profiles to a Pyroscope-compatible ingest endpoint, with a
// bounded retry; what it cannot deliver is counted, never queued without
// bound.
type Pusher struct {
	ingest  string // base URL + /ingest
	client  *http.Client
	backoff []time.Duration // waits before the retries
	// PIDLabel keeps the pid in the series' name and on the samples
	// (the agent's --pid-label); without it both go, as from the metrics.
	PIDLabel bool
	// Pushed and Dropped count profiles delivered and given up on.
	Pushed, Dropped atomic.Uint64
}

// NewPusher pushes to base (http(s)://host:port[/prefix]).
func NewPusher(base string) (*Pusher, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--push %q: want http(s)://HOST:PORT of a Pyroscope-compatible server", base)
	}
	return &Pusher{ingest: strings.TrimSuffix(base, "/") + "/ingest", client: &http.Client{Timeout: 10 * time.Second},
		backoff: []time.Duration{250 * time.Millisecond, time.Second}}, nil
}

// AppName is the application name a process's profiles go under:
// cudatap.cuda{comm=…,container=…,pod=…,namespace=…,service_name=COMM},
// with pid=… first when withPID (the agent's --pid-label): without it,
// the processes with the same labels share one series (a restarted job
// does not start a new one), as the metrics do.
func AppName(l Labels, withPID bool) string {
	var parts []string
	if withPID {
		parts = append(parts, fmt.Sprintf("pid=%d", l.PID))
	}
	for _, kv := range [][2]string{{"comm", l.Comm}, {"container", l.Container}, {"pod", l.Pod}, {"namespace", l.Namespace}, {"service_name", l.Comm}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+safe(kv[1]))
		}
	}
	return "cudatap.cuda{" + strings.Join(parts, ",") + "}"
}

// errPermanent: the server refused the profile itself; retrying cannot help.
var errPermanent = errors.New("refused")

// Push sends one profile covering [from, until]; on failure it retries
// (connection errors, 5xx, 429) with backoff, then gives up and counts it.
func (p *Pusher) Push(ctx context.Context, l Labels, from, until time.Time, prof *profile.Profile) error {
	if !p.PIDLabel {
		// A store makes series of sample labels too.
		prof = prof.Copy()
		for _, s := range prof.Sample {
			delete(s.Label, "pid")
		}
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, err := mw.CreateFormFile("profile", "profile.pb.gz")
	if err == nil {
		err = prof.Write(fw)
	}
	if err == nil {
		err = mw.Close()
	}
	if err != nil {
		p.Dropped.Add(1)
		return err
	}
	q := url.Values{"name": {AppName(l, p.PIDLabel)}, "from": {strconv.FormatInt(from.Unix(), 10)},
		"until": {strconv.FormatInt(max(until.Unix(), from.Unix()+1), 10)}, "format": {"pprof"}, "spyName": {"cudatap"}}
	for attempt := 0; ; attempt++ {
		err = p.post(ctx, q.Encode(), mw.FormDataContentType(), body.Bytes())
		if err == nil {
			p.Pushed.Add(1)
			return nil
		}
		if errors.Is(err, errPermanent) || attempt == len(p.backoff) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(p.backoff[attempt]):
		}
	}
	p.Dropped.Add(1)
	return fmt.Errorf("push the profile of pid %d: %w", l.PID, err)
}

func (p *Pusher) post(ctx context.Context, query, ctype string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.ingest+"?"+query, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: %v", errPermanent, err)
	}
	req.Header.Set("Content-Type", ctype)
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	switch {
	case resp.StatusCode/100 == 2:
		return nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(msg)))
	default:
		return fmt.Errorf("%w: %s: %s", errPermanent, resp.Status, strings.TrimSpace(string(msg)))
	}
}
