package model

import (
	"math"
	"slices"
)

// ranges is a set of disjoint [start, end) address ranges (pinned host
// memory, device allocations), sorted by start.
type ranges struct {
	start, end []uint64
}

// add inserts [start, start+size). Overlapping ranges are replaced: the
// newest registration wins, as it does in the driver. It reports false,
// adding nothing, when r holds maxRanges ranges already: a recording can
// hold any number, and each insertion moves the ranges after it.
func (r *ranges) add(start, size uint64) bool {
	if size == 0 {
		return true
	}
	size = min(size, math.MaxUint64-start) // a range cannot wrap around
	i := r.remove(start, size)
	if len(r.start) >= maxRanges {
		return false
	}
	r.start = slices.Insert(r.start, i, start)
	r.end = slices.Insert(r.end, i, start+size)
	return true
}

// remove deletes every range overlapping [start, start+size) and returns
// where a range starting at start goes. The ranges are disjoint and sorted,
// so those overlapping are consecutive: from the first that ends after
// start to the last that begins before the end.
func (r *ranges) remove(start, size uint64) int {
	end := start + max(size, 1)
	i, _ := slices.BinarySearch(r.end, start+1)
	j, _ := slices.BinarySearch(r.start, end)
	if i < j {
		r.start = slices.Delete(r.start, i, j)
		r.end = slices.Delete(r.end, i, j)
	}
	return i
}

// removeAt deletes the range that starts at p and returns its size.
func (r *ranges) removeAt(p uint64) uint64 {
	i, found := slices.BinarySearch(r.start, p)
	if !found {
		return 0
	}
	size := r.end[i] - r.start[i]
	r.start = slices.Delete(r.start, i, i+1)
	r.end = slices.Delete(r.end, i, i+1)
	return size
}

// contains reports whether [p, p+n) lies inside one range.
func (r *ranges) contains(p, n uint64) bool {
	i, found := slices.BinarySearch(r.start, p)
	if !found {
		i--
	}
	return i >= 0 && p+n <= r.end[i]
}
