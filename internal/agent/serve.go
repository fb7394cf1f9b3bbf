package agent

import (
	"bytes"
	"compress/gzip"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/cudatap/cudatap/internal/units"
)

// What the agent's clients can make it do is bounded, whoever and however
// many they are: the 2026-12-01 review's 200 clients took it to 371 MB (its
// DaemonSet's limit is 256 MiB) and a core, each of them rendering its own
// 6.8 MB /metrics. Now a few requests run at once and the others are
// answered 503 at once, counted; /metrics is rendered at most once a second
// (nothing it serves is fresher), and each profile serialized once a
// window; answers are gzip-compressed for a client that accepts it, and none
// is larger than maxAnswerBytes.

const (
	// maxAnswerBytes bounds a /metrics or /profile answer, uncompressed:
	// 2.5 times the largest /metrics measured (1,024 processes, 6.8 MB).
	maxAnswerBytes = 16 << 20
	// metricsMaxAge: how old a /metrics answer may be.
	metricsMaxAge = time.Second
	// answerTimeout: how long a client may take to read an answer before
	// its connection is closed and its request slot freed.
	answerTimeout = 30 * time.Second
)

// routes are what the agent serves: /metrics, /profile, /capture and /dump
// behind the token, the first two through the request gate, and /healthz.
func (a *Agent) routes() http.Handler {
	gate := newRequestGate(a.o.MaxRequests, a.series)
	mux := http.NewServeMux()
	mux.Handle("/metrics", withToken(a.o.Token, gate.limit("/metrics", &metricsPage{g: a.reg, max: maxAnswerBytes, node: a.o.Node})))
	mux.Handle("/profile", withToken(a.o.Token, gate.limit("/profile", &a.profiles)))
	mux.Handle("/capture", withToken(a.o.Token, &capturer{gpuTimes: a.o.GPUTimes, maxBytes: a.o.CaptureMaxBytes, version: a.o.Version,
		busy: gate.rejected.WithLabelValues("/capture"), log: a.log}))
	mux.Handle("/dump", withToken(a.o.Token, dumper{a}))
	// The agent's own heap, goroutines and allocations (go tool pprof
	// http://ADDR/debug/pprof/heap), only with CUDATAP_AGENT_PPROF=1: where
	// its memory goes on a node (docs/flight-recorder.md, Bounds).
	if os.Getenv("CUDATAP_AGENT_PPROF") == "1" {
		mux.Handle("/debug/pprof/", withToken(a.o.Token, http.HandlerFunc(pprof.Index)))
	}
	// Ready once the first window's probes are live (a readiness probe).
	// It says nothing but that, so it needs no token: Kubernetes probes
	// cannot carry a secret header.
	mux.Handle("/healthz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !a.ready.Load() {
			http.Error(w, "attaching", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	}))
	return mux
}

// withToken lets through only requests that carry the token (when set), as
// "Authorization: Bearer TOKEN", the scheme in any case (RFC 7235).
func withToken(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, cred, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		// Constant time over the token: a mismatch tells nothing of where.
		same := subtle.ConstantTimeCompare([]byte(strings.TrimLeft(cred, " ")), want) == 1
		if !same || !strings.EqualFold(scheme, "Bearer") {
			w.Header().Set("WWW-Authenticate", `Bearer realm="cudatap"`)
			http.Error(w, "unauthorized: send the agent's token as Authorization: Bearer TOKEN", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// requestGate lets a few requests run at once; the others are answered 503
// at once (with Retry-After) and counted by path, in
// cudatap_agent_requests_rejected_total.
type requestGate struct {
	slots    chan struct{}
	rejected *prometheus.CounterVec
}

func newRequestGate(n int, reg prometheus.Registerer) *requestGate {
	g := &requestGate{slots: make(chan struct{}, n),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cudatap_agent_requests_rejected_total",
			Help: "Requests answered 503 (/metrics, /profile: --max-requests were being answered) or 409 (/capture: a capture was running)."},
			[]string{"path"})}
	reg.MustRegister(g.rejected)
	return g
}

// limit serves h through the gate.
func (g *requestGate) limit(path string, h http.Handler) http.Handler {
	rejected := g.rejected.WithLabelValues(path)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case g.slots <- struct{}{}:
		default:
			rejected.Inc()
			w.Header().Set("Retry-After", "1")
			http.Error(w, fmt.Sprintf("busy: the agent answers %d requests at a time (--max-requests); try again in a second", cap(g.slots)),
				http.StatusServiceUnavailable)
			return
		}
		defer func() { <-g.slots }()
		// A client that stops reading must not keep its slot.
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(answerTimeout))
		h.ServeHTTP(w, r)
	})
}

// acceptsGzip reports whether the request's Accept-Encoding takes gzip.
func acceptsGzip(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept-Encoding") {
		for _, part := range strings.Split(v, ",") {
			coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
				continue
			}
			q, ok := strings.CutPrefix(strings.ReplaceAll(params, " ", ""), "q=")
			if f, err := strconv.ParseFloat(q, 64); !ok || err != nil || f > 0 {
				return true
			}
		}
	}
	return false
}

// answer is a response body made once and served to many: plain, and
// gzip-compressed when a client first accepts it.
type answer struct {
	plain []byte
	once  sync.Once
	gz    []byte
}

func (a *answer) write(w http.ResponseWriter, r *http.Request, contentType string) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Vary", "Accept-Encoding")
	body := a.plain
	if acceptsGzip(r) {
		a.once.Do(func() {
			var b bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed)
			zw.Write(a.plain)
			zw.Close()
			a.gz = b.Bytes()
		})
		h.Set("Content-Encoding", "gzip")
		body = a.gz
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.Write(body)
}

// Series the /metrics answer adds about itself (known only as it is made).
const (
	metricsCutName = "cudatap_agent_metrics_series_cut"
	metricsCutHelp = "Series left out of this /metrics answer (whole metric families) to keep it under the agent's bound for one answer: more processes than it can hold."
)

// metricsPage serves /metrics: the registry rendered as Prometheus text at
// most once every metricsMaxAge however many ask, one rendering at a time,
// families that would take it past maxAnswerBytes left out and counted in
// the answer itself (cudatap_agent_metrics_series_cut).
type metricsPage struct {
	g    prometheus.Gatherer
	max  int        // bytes of an answer (maxAnswerBytes)
	node string     // the Hostname label of the agent's series
	mu   sync.Mutex // held while rendering: who asks meanwhile waits for it
	at   time.Time
	last *answer
}

func (m *metricsPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a, err := m.answer()
	if err != nil {
		http.Error(w, "gathering the metrics failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	a.write(w, r, string(expfmt.NewFormat(expfmt.TypeTextPlain)))
}

func (m *metricsPage) answer() (*answer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last != nil && time.Since(m.at) < metricsMaxAge {
		return m.last, nil
	}
	mfs, err := m.g.Gather()
	if err != nil && len(mfs) == 0 {
		return nil, err
	}
	// About the last answer's size: the text is not grown by copies.
	var page bytes.Buffer
	if m.last != nil {
		page.Grow(len(m.last.plain) + len(m.last.plain)/8)
	}
	cut := 0
	for _, mf := range mfs {
		n := page.Len()
		if _, err := expfmt.MetricFamilyToText(&page, mf); err != nil {
			return nil, err
		}
		if page.Len() > m.max-512 { // room for the count of what was cut
			page.Truncate(n)
			cut += len(mf.Metric)
		}
	}
	fmt.Fprintf(&page, "# HELP %s %s\n# TYPE %s gauge\n%s{Hostname=%q} %d\n", metricsCutName, metricsCutHelp, metricsCutName, metricsCutName, m.node, cut)
	m.at, m.last = time.Now(), &answer{plain: page.Bytes()}
	return m.last, nil
}

// lastProfile serves the profile of the last window: all processes, or
// with ?pid=N one of them (samples carry a pid label). Each answer is
// serialized once a window, when first asked, one at a time; set, on the
// reader goroutine, never waits for one.
type lastProfile struct {
	build sync.Mutex // one serialization at a time
	mu    sync.Mutex // guards what follows; never held while serializing
	p     *profile.Profile
	pids  map[string]bool           // the processes of p, made when first asked
	made  map[string]*profileAnswer // by ?pid= ("": all)
}

// profileAnswer is a profile serialized, or why it is not served.
type profileAnswer struct {
	answer
	code int // the HTTP status of err
	err  error
}

func (l *lastProfile) set(p *profile.Profile) {
	l.mu.Lock()
	l.p, l.pids, l.made = p, nil, map[string]*profileAnswer{}
	l.mu.Unlock()
}

func (l *lastProfile) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	pid := r.URL.Query().Get("pid")
	if pid != "" {
		if _, err := strconv.ParseUint(pid, 10, 32); err != nil {
			http.Error(w, "pid: want a process id", http.StatusBadRequest)
			return
		}
	}
	a := l.answer(pid)
	if a.err != nil {
		http.Error(w, a.err.Error(), a.code)
		return
	}
	// pprof's own format is gzip-compressed already.
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(a.plain)))
	w.Write(a.plain)
}

// answer is the profile of pid ("": of all processes).
func (l *lastProfile) answer(pid string) *profileAnswer {
	l.build.Lock()
	defer l.build.Unlock()
	l.mu.Lock()
	p, pids, a := l.p, l.pids, l.made[pid]
	l.mu.Unlock()
	switch {
	case p == nil:
		return &profileAnswer{code: http.StatusServiceUnavailable,
			err: errors.New("no window has finished yet (profiles are made per window; --continuous makes one every --every)")}
	case a != nil:
		return a
	}
	if pid != "" && pids == nil {
		pids = map[string]bool{}
		for _, s := range p.Sample {
			if v := s.Label["pid"]; len(v) > 0 {
				pids[v[0]] = true
			}
		}
		l.keep(p, func() { l.pids = pids })
	}
	if pid != "" && !pids[pid] {
		return &profileAnswer{code: http.StatusNotFound, err: fmt.Errorf("no CUDA calls of process %s in the last window", pid)}
	}
	a = &profileAnswer{}
	q := p
	if pid != "" {
		q = p.Copy()
		q.FilterSamplesByTag(func(s *profile.Sample) bool {
			return len(s.Label["pid"]) > 0 && s.Label["pid"][0] == pid
		}, nil)
		q = q.Compact() // without the other processes' locations and functions
	}
	var b bytes.Buffer
	switch err := q.Write(&b); {
	case err != nil:
		a.code, a.err = http.StatusInternalServerError, fmt.Errorf("serializing the profile: %w", err)
	case b.Len() > maxAnswerBytes:
		a.code, a.err = http.StatusInternalServerError, fmt.Errorf("the last window's profile is %s, more than the %s the agent answers at once: ask for one process's, with ?pid=",
			units.Bytes(uint64(b.Len())), units.Bytes(maxAnswerBytes))
	default:
		a.plain = b.Bytes()
	}
	l.keep(p, func() { l.made[pid] = a })
	return a
}

// keep runs save under the lock, unless a new window's profile replaced p
// meanwhile.
func (l *lastProfile) keep(p *profile.Profile, save func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.p == p {
		save()
	}
}
