package model

// StreamSnap is a running stream's counters at one moment, for live views.
type StreamSnap struct {
	PID           uint32
	Process       string
	Stream        int
	Label         string
	Launches      int64
	CopyBytes     uint64
	Syncs         int64
	SyncBlockedNs uint64
	Queued        int // GPU operations not yet known to be complete
}

// Snapshot returns every stream's counters so far. Not safe concurrently
// with Handle: callers serialize (see tracer.Config.OnLive).
func (m *Model) Snapshot() []StreamSnap {
	var out []StreamSnap
	for _, ps := range m.procs {
		for _, s := range ps.p.Streams {
			st := &s.Stats
			out = append(out, StreamSnap{PID: ps.p.PID, Process: ps.p.Label(), Stream: s.ID, Label: s.Label(),
				Launches: st.Launches + st.GraphLaunches, CopyBytes: st.BytesHtoD + st.BytesDtoH + st.BytesDtoD + st.BytesOther,
				Syncs: st.Syncs, SyncBlockedNs: st.SyncBlockedNs, Queued: len(ps.st[s.ID].pending())})
		}
	}
	return out
}
