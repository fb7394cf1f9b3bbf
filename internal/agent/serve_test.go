package agent

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestRequestGate: with n requests being answered, the next is answered
// 503 at once (with Retry-After) and counted under its path; once one
// ends, a request goes through again.
func TestRequestGate(t *testing.T) {
	const n = 2
	reg := prometheus.NewRegistry()
	g := newRequestGate(n, reg)
	entered, release := make(chan struct{}), make(chan struct{})
	h := g.limit("/metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("block") != "" {
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok")
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(query string) *http.Response {
		resp, err := http.Get(srv.URL + "/metrics?" + query)
		if err != nil {
			t.Error(err)
			return nil
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if resp := get("block=1"); resp != nil && resp.StatusCode != http.StatusOK {
				t.Errorf("a request within the limit: %d", resp.StatusCode)
			}
		})
		<-entered
	}
	resp := get("")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("request %d of %d at once: %d (Retry-After %q), want 503 with Retry-After", n+1, n, resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if got := promtest.ToFloat64(g.rejected.WithLabelValues("/metrics")); got != 1 {
		t.Errorf("cudatap_agent_requests_rejected_total{path=\"/metrics\"} = %v, want 1", got)
	}
	close(release)
	wg.Wait()
	if resp := get(""); resp.StatusCode != http.StatusOK {
		t.Errorf("after the others ended: %d, want 200", resp.StatusCode)
	}
}

func TestAcceptsGzip(t *testing.T) {
	for _, tc := range []struct {
		header string
		want   bool
	}{
		{"", false},
		{"gzip", true},
		{"GZIP", true},
		{"deflate, gzip;q=0.5", true},
		{"gzip; q=1.0, identity", true},
		{"gzip;q=0", false},
		{"gzip;q=0.000", false},
		{"br, deflate", false},
		{"x-gzip", false},
	} {
		r := httptest.NewRequest("GET", "/metrics", nil)
		if tc.header != "" {
			r.Header.Set("Accept-Encoding", tc.header)
		}
		if got := acceptsGzip(r); got != tc.want {
			t.Errorf("Accept-Encoding %q: gzip %v, want %v", tc.header, got, tc.want)
		}
	}
}

// counters registers n counters, each with series series of a long label.
func counters(reg *prometheus.Registry, n, series int) {
	for i := range n {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: fmt.Sprintf("test_family_%02d_total", i), Help: "A test family."}, []string{"pid"})
		for s := range series {
			c.WithLabelValues(fmt.Sprintf("%08d", s)).Add(float64(s))
		}
		reg.MustRegister(c)
	}
}

// TestMetricsPage: /metrics is gzip-compressed for a client that accepts
// it (the same text once decompressed), plain for one that does not, and
// parses as Prometheus text either way.
func TestMetricsPage(t *testing.T) {
	reg := prometheus.NewRegistry()
	counters(reg, 3, 500)
	m := &metricsPage{g: reg, max: maxAnswerBytes}
	ask := func(enc string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/metrics", nil)
		if enc != "" {
			r.Header.Set("Accept-Encoding", enc)
		}
		w := httptest.NewRecorder()
		m.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("/metrics: %d %s", w.Code, w.Body)
		}
		return w
	}
	plain := ask("")
	if plain.Header().Get("Content-Encoding") != "" {
		t.Errorf("no gzip asked, Content-Encoding %q", plain.Header().Get("Content-Encoding"))
	}
	zipped := ask("gzip")
	if zipped.Header().Get("Content-Encoding") != "gzip" || zipped.Header().Get("Vary") != "Accept-Encoding" {
		t.Fatalf("gzip asked: Content-Encoding %q, Vary %q", zipped.Header().Get("Content-Encoding"), zipped.Header().Get("Vary"))
	}
	zr, err := gzip.NewReader(zipped.Body)
	if err != nil {
		t.Fatal(err)
	}
	text, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(text, plain.Body.Bytes()) {
		t.Error("the gzip answer is not the plain one compressed")
	}
	if zipped.Body.Len()*5 > len(text) {
		t.Errorf("gzip: %d bytes for %d", zipped.Body.Len(), len(text))
	}
	fams := parseMetrics(t, text)
	if len(fams["test_family_02_total"].GetMetric()) != 500 || metricsCut(fams) != 0 {
		t.Errorf("families %d, cut %v", len(fams), metricsCut(fams))
	}
}

// TestMetricsPageBound: an answer that would pass the bound leaves whole
// families out, and says how many series, in the answer itself.
func TestMetricsPageBound(t *testing.T) {
	reg := prometheus.NewRegistry()
	counters(reg, 10, 1000) // about 40 kB a family
	m := &metricsPage{g: reg, max: 100 << 10}
	w := httptest.NewRecorder()
	m.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Body.Len() > m.max {
		t.Errorf("answer of %d bytes, bound %d", w.Body.Len(), m.max)
	}
	fams := parseMetrics(t, w.Body.Bytes())
	kept := 0
	for name, f := range fams {
		if strings.HasPrefix(name, "test_family_") {
			kept += len(f.GetMetric())
		}
	}
	if kept == 0 || kept == 10000 || metricsCut(fams) != float64(10000-kept) {
		t.Errorf("kept %d series, cut %v: want some kept and the rest counted", kept, metricsCut(fams))
	}
}

func parseMetrics(t *testing.T, text []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatalf("not Prometheus text: %v", err)
	}
	return fams
}

func metricsCut(fams map[string]*dto.MetricFamily) float64 {
	f := fams[metricsCutName]
	if f == nil || len(f.GetMetric()) != 1 {
		return -1
	}
	return f.GetMetric()[0].GetGauge().GetValue()
}

// testProfile has one sample of each of pids, labelled with it.
func testProfile(pids ...string) *profile.Profile {
	fn := &profile.Function{ID: 1, Name: "cudaLaunchKernel"}
	loc := &profile.Location{ID: 1, Line: []profile.Line{{Function: fn}}}
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "calls", Unit: "count"}}, Function: []*profile.Function{fn}, Location: []*profile.Location{loc}}
	for _, pid := range pids {
		p.Sample = append(p.Sample, &profile.Sample{Location: []*profile.Location{loc}, Value: []int64{1}, Label: map[string][]string{"pid": {pid}}})
	}
	return p
}

// TestLastProfile: /profile serves the last window's profile, of all
// processes or of one, 503 before any window, 404 for a process not in
// it; a new window replaces what was served.
func TestLastProfile(t *testing.T) {
	var l lastProfile
	ask := func(query string) (int, *profile.Profile) {
		w := httptest.NewRecorder()
		l.ServeHTTP(w, httptest.NewRequest("GET", "/profile"+query, nil))
		if w.Code != http.StatusOK {
			return w.Code, nil
		}
		p, err := profile.ParseData(w.Body.Bytes())
		if err != nil {
			t.Fatalf("/profile%s: %v", query, err)
		}
		return w.Code, p
	}
	if code, _ := ask(""); code != http.StatusServiceUnavailable {
		t.Errorf("before any window: %d, want 503", code)
	}
	l.set(testProfile("10", "20"))
	for range 2 { // the second time from what was serialized
		if _, p := ask(""); p == nil || len(p.Sample) != 2 {
			t.Fatalf("/profile: %v", p)
		}
		if _, p := ask("?pid=20"); p == nil || len(p.Sample) != 1 || p.Sample[0].Label["pid"][0] != "20" {
			t.Fatalf("/profile?pid=20: %v", p)
		}
		if code, _ := ask("?pid=30"); code != http.StatusNotFound {
			t.Errorf("?pid=30: %d, want 404", code)
		}
	}
	if code, _ := ask("?pid=x"); code != http.StatusBadRequest {
		t.Errorf("?pid=x: %d, want 400", code)
	}
	l.set(testProfile("30"))
	if _, p := ask(""); p == nil || len(p.Sample) != 1 || p.Sample[0].Label["pid"][0] != "30" {
		t.Fatalf("after a new window: %v", p)
	}
	if code, _ := ask("?pid=20"); code != http.StatusNotFound {
		t.Errorf("?pid=20 after a new window: %d, want 404", code)
	}
}

// BenchmarkMetricsPage renders /metrics of 30 families of 1,000 series
// (the stream series of 30 processes) as the cache expires: B/op is what a
// rendering allocates.
//
//	go test -run '^$' -bench MetricsPage -benchmem ./internal/agent/
func BenchmarkMetricsPage(b *testing.B) {
	reg := prometheus.NewRegistry()
	counters(reg, 30, 1000)
	m := &metricsPage{g: reg, max: maxAnswerBytes}
	for b.Loop() {
		m.at = time.Time{}
		if _, err := m.answer(); err != nil {
			b.Fatal(err)
		}
	}
}
