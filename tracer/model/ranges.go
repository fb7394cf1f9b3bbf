package model

import (
	"math"
	"slices"
)

// Ranges is a set of disjoint [start, end) address ranges (pinned host
// memory, device allocations), sorted by start. The model and the lints
// keep their allocations in it.
type Ranges struct {
	start, end []uint64
}

// Add inserts [start, start+size). Overlapping ranges are replaced: the
// newest registration wins, as it does in the driver. It reports false,
// adding nothing, when r would hold more than limit ranges: a recording can
// hold any number, and each insertion moves the ranges after it.
func (r *Ranges) Add(start, size uint64, limit int) bool {
	if size == 0 {
		return true
	}
	size = min(size, math.MaxUint64-start) // a range cannot wrap around
	i := r.Remove(start, size)
	if len(r.start) >= limit {
		return false
	}
	r.start = slices.Insert(r.start, i, start)
	r.end = slices.Insert(r.end, i, start+size)
	return true
}

// Remove deletes every range overlapping [start, start+size) and returns
// where a range starting at start goes. The ranges are disjoint and sorted,
// so those overlapping are consecutive: from the first that ends after
// start to the last that begins before the end.
func (r *Ranges) Remove(start, size uint64) int {
	end := start + max(size, 1)
	i, _ := slices.BinarySearch(r.end, start+1)
	j, _ := slices.BinarySearch(r.start, end)
	if i < j {
		r.start = slices.Delete(r.start, i, j)
		r.end = slices.Delete(r.end, i, j)
	}
	return i
}

// RemoveAt deletes the range that starts at p and returns it; ok is false
// when none does.
func (r *Ranges) RemoveAt(p uint64) (start, end uint64, ok bool) {
	i, found := slices.BinarySearch(r.start, p)
	if !found {
		return 0, 0, false
	}
	start, end = r.start[i], r.end[i]
	r.start = slices.Delete(r.start, i, i+1)
	r.end = slices.Delete(r.end, i, i+1)
	return start, end, true
}

// Find returns the range p lies in; ok is false when it lies in none.
func (r *Ranges) Find(p uint64) (start, end uint64, ok bool) {
	i, found := slices.BinarySearch(r.start, p)
	if !found {
		i--
	}
	if i >= 0 && p < r.end[i] {
		return r.start[i], r.end[i], true
	}
	return 0, 0, false
}

// Contains reports whether [p, p+n) lies inside one range.
func (r *Ranges) Contains(p, n uint64) bool {
	_, end, ok := r.Find(p)
	return ok && p+n <= end
}

// Bounds returns the start of the first range and the end of the last;
// ok is false when there is none.
func (r *Ranges) Bounds() (start, end uint64, ok bool) {
	if len(r.start) == 0 {
		return 0, 0, false
	}
	return r.start[0], r.end[len(r.end)-1], true
}

// Len is the number of ranges.
func (r *Ranges) Len() int { return len(r.start) }
