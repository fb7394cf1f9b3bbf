package symbolize

import "github.com/cudatap/cudatap/internal/objfile"

// Names of internal/objfile that tracer/session.go and tracer/reader.go
// still spell through this package. Drop each once they import objfile.
type (
	// Cache is [objfile.Cache].
	Cache = objfile.Cache
	// Mapping is [objfile.Mapping].
	Mapping = objfile.Mapping
)

// NewCache is [objfile.NewCache].
func NewCache(maxFiles int) *Cache { return objfile.NewCache(maxFiles) }
