package model

import "slices"

// ranges is a set of disjoint [start, end) address ranges (pinned host
// memory, device allocations), sorted by start.
type ranges struct {
	start, end []uint64
}

// add inserts [start, start+size). Overlapping ranges are replaced: the
// newest registration wins, as it does in the driver.
func (r *ranges) add(start, size uint64) {
	if size == 0 {
		return
	}
	r.remove(start, size)
	i, _ := slices.BinarySearch(r.start, start)
	r.start = append(r.start, 0)
	r.end = append(r.end, 0)
	copy(r.start[i+1:], r.start[i:])
	copy(r.end[i+1:], r.end[i:])
	r.start[i], r.end[i] = start, start+size
}

// remove deletes every range overlapping [start, start+size).
func (r *ranges) remove(start, size uint64) {
	end := start + max(size, 1)
	j := 0
	for i := range r.start {
		if r.start[i] < end && start < r.end[i] {
			continue
		}
		r.start[j], r.end[j] = r.start[i], r.end[i]
		j++
	}
	r.start, r.end = r.start[:j], r.end[:j]
}

// removeAt deletes the range that starts at p and returns its size.
func (r *ranges) removeAt(p uint64) uint64 {
	i, found := slices.BinarySearch(r.start, p)
	if !found {
		return 0
	}
	size := r.end[i] - r.start[i]
	r.start = append(r.start[:i], r.start[i+1:]...)
	r.end = append(r.end[:i], r.end[i+1:]...)
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
