package tracer

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/cudatap/cudatap/tracer/gputime"
	"github.com/cudatap/cudatap/tracer/model"
)

// logMisses has the model tell, when CUDATAP_GPUTIME_DEBUG names a
// directory, each measurement it could not join (unmatched, late, or a
// second one for an op that is not a graph), and each that became an op
// CUPTI alone saw ("CUPTI only"), into DIR/model-PID.tsv, the
// first maxMissLines of each reason per process, next to the collector's
// records (tracer/gputime/debug.go). Tab-separated:
//
//	why corr tid api_start api_end kind start end name [op_corr op_api op_tid op_stream op_enqueued op_measured]
//
// corr is CUPTI's correlation id, op_corr the op's in the trace
// (args.correlation); the op, where the join found one.
func (s *Session) logMisses() {
	dir := gputime.DebugDir()
	if dir == "" {
		return
	}
	s.gputimes.mu.Lock()
	if s.gputimes.misses != nil {
		s.gputimes.mu.Unlock()
		return
	}
	ml := &missLog{dir: dir, files: map[uint32]*os.File{}, lines: map[missKey]int{}}
	s.gputimes.misses = ml
	s.gputimes.mu.Unlock()
	s.modelMu.Lock()
	s.model.OnMeasureMiss = ml.miss
	s.modelMu.Unlock()
}

const maxMissLines = 2000

type missKey struct {
	pid uint32
	why string
}

// missLog writes the model's misses, on the reader goroutine with the
// model's lock held: it needs no lock of its own.
type missLog struct {
	dir   string
	files map[uint32]*os.File // left open until cudatap exits: a diagnosis only
	lines map[missKey]int
}

func (ml *missLog) miss(pid uint32, why string, r *model.Measurement, op *model.GPUOp) {
	k := missKey{pid, why}
	if ml.lines[k]++; ml.lines[k] > maxMissLines {
		return
	}
	f := ml.files[pid]
	if f == nil {
		os.MkdirAll(ml.dir, 0o755)
		var err error
		if f, err = os.Create(filepath.Join(ml.dir, fmt.Sprintf("model-%d.tsv", pid))); err != nil {
			return
		}
		ml.files[pid] = f
	}
	line := fmt.Sprintf("%s\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t%s", why, r.Correlation, r.TID, r.APIStart, r.APIEnd, r.Kind.Category(), r.Start, r.End, r.Name)
	if op != nil {
		line += fmt.Sprintf("\t%d\t%v\t%d\t%d\t%d\t%v", op.Correlation, op.API, op.TID, op.Stream, op.Enqueued, op.Measured)
	}
	f.WriteString(line + "\n")
}
