package objfile

import (
	"container/list"
	"sync"
)

// Cache shares parsed and indexed ELF files between processes: every
// PyTorch process maps the same libtorch_cuda.so, and it should be indexed
// once. Files are keyed by GNU build-id when they have one (so copies in
// different containers or overlay layers are shared), else by device,
// inode, size and modification time. The cache holds at most max files and
// evicts the least recently used. It is safe for concurrent use.
type Cache struct {
	mu     sync.Mutex
	max    int
	lru    list.List // of *cacheEntry; front is most recently used
	byStat map[statKey]*list.Element
	byID   map[string]*list.Element
}

type cacheEntry struct {
	f    *File
	keys []statKey // every file seen with this content
}

// NewCache returns a cache holding at most maxFiles files (at least 1).
func NewCache(maxFiles int) *Cache {
	return &Cache{
		max:    max(maxFiles, 1),
		byStat: make(map[statKey]*list.Element),
		byID:   make(map[string]*list.Element),
	}
}

// Open returns the File for path, from the cache if a file with the same
// identity was opened before. The returned File stays usable after being
// evicted; callers do not close it.
func (c *Cache) Open(path string) (*File, error) {
	fd, err := OpenFile(path)
	if err != nil {
		return nil, err
	}
	fi, err := fd.Stat()
	if err != nil {
		fd.Close()
		return nil, err
	}
	key := statKeyOf(fi)

	c.mu.Lock()
	if el, ok := c.byStat[key]; ok {
		c.lru.MoveToFront(el)
		f := el.Value.(*cacheEntry).f
		c.mu.Unlock()
		f.adopt(fd, path, key)
		return f, nil
	}
	c.mu.Unlock()

	// Parse outside the lock: it reads from the file.
	f, err := newFile(fd, path, key)
	if err != nil {
		fd.Close()
		return nil, err
	}

	// Evicted files are closed after unlocking: Close waits for an index
	// build in progress, and that must not stall every other Open.
	var evicted []*File
	defer func() {
		for _, f := range evicted {
			f.Close()
		}
	}()
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byStat[key]; ok { // lost a race with another Open
		c.lru.MoveToFront(el)
		f.Close()
		return el.Value.(*cacheEntry).f, nil
	}
	if id := f.BuildID(); id != "" {
		if el, ok := c.byID[id]; ok {
			e := el.Value.(*cacheEntry)
			// Same build-id, different file. Stripped and unstripped
			// copies share a build-id; keep the one with more symbols.
			if !f.HasSymtab() || e.f.HasSymtab() {
				e.keys = append(e.keys, key)
				c.byStat[key] = el
				c.lru.MoveToFront(el)
				f.Close()
				return e.f, nil
			}
			evicted = append(evicted, c.removeLocked(el))
		}
	}
	el := c.lru.PushFront(&cacheEntry{f: f, keys: []statKey{key}})
	c.byStat[key] = el
	if id := f.BuildID(); id != "" {
		c.byID[id] = el
	}
	for c.lru.Len() > c.max {
		evicted = append(evicted, c.removeLocked(c.lru.Back()))
	}
	return f, nil
}

// Len returns the number of files in the cache.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// removeLocked drops an entry and returns its File, for the caller to
// Close once the lock is released. Other holders may still use the File:
// closing only releases the descriptor, and it is reopened should an index
// still be needed.
func (c *Cache) removeLocked(el *list.Element) *File {
	e := c.lru.Remove(el).(*cacheEntry)
	for _, k := range e.keys {
		if c.byStat[k] == el {
			delete(c.byStat, k)
		}
	}
	if id := e.f.BuildID(); id != "" && c.byID[id] == el {
		delete(c.byID, id)
	}
	return e.f
}
