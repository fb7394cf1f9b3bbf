package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/cudatap/cudatap/tracer/nvml"
)

type topOptions struct {
	pids     []int
	all      bool
	interval time.Duration
	count    int
}

// topFeed starts what feeds the per traced process and stream lines of
// `cudatap top` (launches/s, copy bandwidth, share of wall time blocked in
// synchronization, queue depth) and returns the function the renderer calls
// at every refresh; nil when nothing is traced.
type topFeed func(ctx context.Context, g *globalOptions, pids []int, all bool) (extra func() []string, err error)

// newTopCmd makes `cudatap top`; feed, if not nil, adds the tracer's lines
// (traceForTop) under the GPU view.
func newTopCmd(g *globalOptions, feed topFeed) *cobra.Command {
	o := &topOptions{}
	cmd := &cobra.Command{
		Use:   "top [-p PID]... | --all",
		Short: "Live view of GPU utilization, memory, power and clocks, and the processes using them",
		Long: `top refreshes every second: per GPU utilization, memory, power, temperature,
clocks, PCIe throughput and throttle reasons, and the processes using each GPU.
On a terminal it is full screen (q or Ctrl-C quits); otherwise it prints one
block of plain lines per refresh.`,
		Example: `  cudatap top --all
  cudatap top -p 4123
  cudatap top -n 5 > gpus.log`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runTop(cmd, g, o, feed)
		},
	}
	f := cmd.Flags()
	f.IntSliceVarP(&o.pids, "pid", "p", nil, "show only these processes (repeatable or comma-separated)")
	f.BoolVar(&o.all, "all", false, "show every process using a GPU (the default without -p)")
	f.DurationVar(&o.interval, "interval", time.Second, "refresh interval")
	f.IntVarP(&o.count, "iterations", "n", 0, "stop after this many refreshes (0: until q or Ctrl-C)")
	return cmd
}

func runTop(cmd *cobra.Command, g *globalOptions, o *topOptions, feed topFeed) error {
	if len(o.pids) > 0 && o.all {
		return fmt.Errorf("give -p PID or --all, not both")
	}
	if o.interval <= 0 {
		return fmt.Errorf("--interval %v: must be positive", o.interval)
	}
	if err := checkTargets(o.pids, nil); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()

	r := &topRenderer{Proc: gpuProcInfo}
	for _, p := range o.pids {
		r.PIDs = append(r.PIDs, uint32(p))
	}
	s, err := nvml.New(nvml.Options{Interval: o.interval, Logger: g.logger()})
	switch {
	case err == nil:
		defer s.Close()
		r.Driver = s.Driver()
	case errors.Is(err, nvml.ErrNVMLUnavailable) && feed != nil:
		// The tracer's lines still work: one warning, then carry on.
		fmt.Fprintln(cmd.ErrOrStderr(), "cudatap: warning:", err)
		r.Warning = err.Error()
	default:
		return err
	}
	if feed != nil {
		if r.Extra, err = feed(ctx, g, o.pids, o.all); err != nil {
			return err
		}
	}

	scr := newTopScreen(cmd.OutOrStdout())
	scr.start(cancel)
	defer scr.stop()
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	for n := 1; ; n++ {
		var samples []nvml.Sample
		if s != nil {
			if samples, _, err = s.Poll(); err != nil {
				return err
			}
		}
		scr.draw(r.Lines(time.Now(), samples))
		if o.count > 0 && n >= o.count {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil // q, Ctrl-C or SIGTERM: a clean quit
		case <-tick.C:
		}
	}
}

// topScreen draws full screen on a terminal (alternate screen, raw input for
// q and Ctrl-C, restored on exit) and plain blocks of lines otherwise.
type topScreen struct {
	out   io.Writer
	tty   bool
	fd    int
	inFd  int
	saved *term.State
}

func newTopScreen(w io.Writer) *topScreen {
	s := &topScreen{out: w, inFd: int(os.Stdin.Fd())}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		s.tty, s.fd = true, int(f.Fd())
	}
	return s
}

func (s *topScreen) start(quit func()) {
	if !s.tty {
		return
	}
	if term.IsTerminal(s.inFd) {
		if st, err := term.MakeRaw(s.inFd); err == nil {
			s.saved = st
			go s.keys(quit)
		}
	}
	fmt.Fprint(s.out, "\x1b[?1049h\x1b[?25l") // alternate screen, hide the cursor
}

// keys reads raw input: q, Q, Ctrl-C (no SIGINT in raw mode) and Ctrl-D quit.
func (s *topScreen) keys(quit func()) {
	buf := make([]byte, 32)
	for {
		n, err := os.Stdin.Read(buf)
		if err != nil {
			return
		}
		for _, c := range buf[:n] {
			if c == 'q' || c == 'Q' || c == 3 || c == 4 {
				quit()
				return
			}
		}
	}
}

func (s *topScreen) stop() {
	if !s.tty {
		return
	}
	fmt.Fprint(s.out, "\x1b[?25h\x1b[?1049l") // show the cursor, leave the alternate screen
	if s.saved != nil {
		term.Restore(s.inFd, s.saved)
		s.saved = nil
	}
}

func (s *topScreen) draw(lines []string) {
	if !s.tty {
		var b strings.Builder
		for _, l := range lines {
			b.WriteString(l)
			b.WriteByte('\n')
		}
		b.WriteByte('\n')
		io.WriteString(s.out, b.String())
		return
	}
	w, h, err := term.GetSize(s.fd)
	if err != nil || w <= 0 || h <= 1 {
		w, h = 160, 50
	}
	var b strings.Builder
	b.WriteString("\x1b[H")
	for i, l := range lines {
		if i >= h-1 {
			break
		}
		b.WriteString(clip(l, w))
		b.WriteString("\x1b[K\r\n") // raw mode: no implicit carriage return
	}
	b.WriteString("\x1b[J")
	fmt.Fprintf(&b, "\x1b[%d;1H\x1b[7m%s\x1b[0m", h, clip(" q or Ctrl-C quits ", w))
	io.WriteString(s.out, b.String())
}

func clip(s string, w int) string {
	if utf8.RuneCountInString(s) <= w {
		return s
	}
	r := []rune(s)
	return string(r[:w])
}
