package html

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"time"

	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer/model"
)

// The page is one file: the template's markup with the stylesheet, the
// script and the data inline. Its content security policy allows nothing
// but that, so it opens offline and makes no request.
var (
	//go:embed assets/page.html
	pageHTML string
	//go:embed assets/report.css
	pageCSS string
	//go:embed assets/report.js
	pageJS string
)

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"dur":   units.Duration,
	"bytes": units.Bytes,
	"pct":   func(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) },
	"share": share,
	"rate": func(f float64) string {
		switch {
		case f >= 1e6:
			return fmt.Sprintf("%.2f M/s", f/1e6)
		case f >= 1e3:
			return fmt.Sprintf("%.1f k/s", f/1e3)
		}
		return fmt.Sprintf("%.0f/s", f)
	},
	"ovl": overlapCell,
	"idle": func(d DeviceOverlap) string {
		idle := d.SpanNs - min(d.SpanNs, d.AtMost.Any)
		return units.Duration(idle) + " (" + share(idle, d.SpanNs) + ")"
	},
	"queue":    queueCell,
	"measured": measuredCell,
	"holders": func(l []Holder, peak bool) any {
		return struct {
			List []Holder
			Peak bool
		}{l, peak}
	},
	"reading": func(r model.Reading, unit string) string {
		if !r.Known() || math.IsInf(float64(r), 0) {
			return "-"
		}
		return fmt.Sprintf("%.0f%s", float64(r), unit)
	},
	// Set per page (Report.WriteHTML): times on the timeline's axis.
	"at":     func(uint64) string { return "" },
	"offset": func(int64) string { return "" },
	"rel":    func(uint64) int64 { return 0 },
}).Parse(pageHTML))

type pageData struct {
	R             *Report
	CSS           template.CSS
	JS            template.JS
	Data          template.JS
	Span          uint64
	Wall          string
	Window        tlWindow
	MaxSlices     int
	Bucket        uint64
	MemoryProfile string
}

// WriteHTML writes the report as one self-contained page.
// memoryProfile, when not "", is the path of the profile WriteMemoryProfile
// wrote, which the page names.
func (rep *Report) WriteHTML(w io.Writer, memoryProfile string) error {
	data, err := json.Marshal(&rep.timeline)
	if err != nil {
		return fmt.Errorf("report data: %w", err)
	}
	t0 := rep.timeline.T0
	tmpl, err := page.Clone()
	if err != nil {
		return err
	}
	tmpl.Funcs(template.FuncMap{
		"at":     func(t uint64) string { return "+" + units.Duration(t-min(t, t0)) },
		"offset": func(t int64) string { return "+" + units.Duration(uint64(max(t, 0))) },
		"rel":    rep.timeline.rel,
	})
	d := pageData{R: rep, CSS: template.CSS(pageCSS), JS: template.JS(pageJS), Data: template.JS(data),
		Span: rep.End - min(rep.End, rep.Start), Window: rep.timeline.Window, MaxSlices: rep.maxSlices,
		Bucket: rep.bucket, MemoryProfile: memoryProfile}
	if rep.Start != 0 {
		d.Wall = time.Unix(0, int64(rep.Start)+rep.WallOffsetNs).UTC().Format("2006-01-02 15:04:05 UTC")
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, d); err != nil {
		return fmt.Errorf("report page: %w", err)
	}
	_, err = w.Write(buf.Bytes())
	return err
}
