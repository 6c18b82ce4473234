package mcpwire

import (
	"sync"

	"golang.org/x/sys/unix"
)

// A buffer holds the bytes of one message while it is read and used.
//
// Small messages live in Go memory, in buffers of smallCap bytes recycled
// through a pool. A message that outgrows one moves to an anonymous memory
// mapping, grown with mremap(2) (the kernel moves the pages, nothing is
// copied, no old buffer is left for the garbage collector) and unmapped by
// release, which hands its memory back to the kernel at once. A 10 MiB
// result thus costs the daemon about 10 MiB while it is in flight and
// nothing after, where Go buffers grown by doubling cost two to three
// times that, and more until a collection (the daemon runs with a 400%
// GC target, proxy.TuneGC).
type buffer struct {
	b      []byte // b[:len] is the message; cap(b) is what is held
	mapped []byte // the whole mapping when b is mapped memory, else nil
}

// smallCap is the size of pooled Go buffers; larger messages are mapped.
const smallCap = 64 << 10

// minMapped is the first size of a mapping.
const minMapped = 1 << 20

var smallBuffers = sync.Pool{New: func() any { b := make([]byte, 0, smallCap); return &b }}

// newBuffer returns an empty buffer of smallCap bytes.
func newBuffer() *buffer {
	return &buffer{b: (*smallBuffers.Get().(*[]byte))[:0]}
}

// bytes returns the buffer's content.
func (b *buffer) bytes() []byte { return b.b }

// reserve makes room for at least n more bytes and returns the free space
// (len ≥ n). Content already in the buffer may move: slices of it taken
// before are invalid afterwards.
func (b *buffer) reserve(n int) []byte {
	if cap(b.b)-len(b.b) >= n {
		return b.b[len(b.b):cap(b.b)]
	}
	need := len(b.b) + n
	size := max(2*cap(b.b), need, minMapped)
	size = (size + pageSize - 1) &^ (pageSize - 1)
	switch {
	case b.mapped != nil:
		if m, err := unix.Mremap(b.mapped, size, unix.MREMAP_MAYMOVE); err == nil {
			b.mapped = m
			b.b = m[:len(b.b)]
			return b.b[len(b.b):cap(b.b)]
		}
	default:
		if m, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err == nil {
			n := copy(m, b.b)
			b.putSmall()
			b.mapped = m
			b.b = m[:n]
			return b.b[n:cap(b.b)]
		}
	}
	// No mapping to be had (address space or map count exhausted): Go
	// memory, which the collector reclaims.
	nb := make([]byte, len(b.b), size)
	copy(nb, b.b)
	b.unmap()
	b.putSmall()
	b.b = nb
	return b.b[len(b.b):cap(b.b)]
}

// grow extends the content by n bytes written into the space reserve
// returned.
func (b *buffer) grow(n int) { b.b = b.b[:len(b.b)+n] }

// truncate cuts the content to n bytes.
func (b *buffer) truncate(n int) { b.b = b.b[:n] }

// appendBytes appends p.
func (b *buffer) appendBytes(p []byte) {
	copy(b.reserve(len(p)), p)
	b.grow(len(p))
}

// release gives the buffer's memory back (to the pool, or to the kernel).
// Nothing of its content may be used afterwards.
func (b *buffer) release() {
	b.unmap()
	b.putSmall()
	b.b = nil
}

// putSmall returns a pooled Go buffer to the pool.
func (b *buffer) putSmall() {
	if b.mapped == nil && cap(b.b) == smallCap {
		s := b.b[:0]
		smallBuffers.Put(&s)
	}
}

// unmap unmaps mapped memory.
func (b *buffer) unmap() {
	if b.mapped != nil {
		_ = unix.Munmap(b.mapped)
		b.mapped = nil
		b.b = nil
	}
}

var pageSize = unix.Getpagesize()
