//go:build linux && (amd64 || arm64)

package cuda

import (
	"fmt"
	"sort"
	"syscall"
)

// guardSize is the address space the guarded emulation reserves for its
// device memory: its Properties' TotalMem. Pages are committed only as
// allocations touch them.
const guardSize = 1 << 32

// guardArena is the guarded emulation's device memory (EmulatedGuarded):
// one reserved mapping that is inaccessible (PROT_NONE) except during the
// driver's own calls, so that a host read or write of device memory —
// which works on the plain emulation, where device memory is C memory,
// and faults on a GPU — faults here too. Allocations are first fit in the
// spans freed so far, else carved from the top; the opened span is
// everything ever carved.
type guardArena struct {
	mem  []byte
	top  int     // bytes carved from the start, page-rounded
	free []gspan // freed spans, by offset, neighbours merged
	// opened is how deep the driver's calls are nested (a Launch inside
	// nothing, an Alloc inside nothing: 0 or 1).
	opened int
}

// gspan is [off, off+n) of a guardArena.
type gspan struct{ off, n int }

// newGuardArena reserves the arena's address space, inaccessible.
func newGuardArena() (*guardArena, error) {
	mem, err := syscall.Mmap(-1, 0, guardSize, syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("cuda: guarded emulation: reserving %d bytes: %w", guardSize, err)
	}
	return &guardArena{mem: mem}, nil
}

// open makes the carved span readable and writable for a driver call; the
// function it returns closes it again. Calls nest (Alloc opens to zero
// what it carved).
func (a *guardArena) open() func() {
	a.opened++
	if a.opened == 1 {
		a.protect(syscall.PROT_READ | syscall.PROT_WRITE)
	}
	return func() {
		a.opened--
		if a.opened == 0 {
			a.protect(syscall.PROT_NONE)
		}
	}
}

func (a *guardArena) protect(prot int) {
	if a.top == 0 {
		return
	}
	if err := syscall.Mprotect(a.mem[:a.top], prot); err != nil {
		panic(fmt.Errorf("cuda: guarded emulation: mprotect: %w", err))
	}
}

// alloc returns the offset of n bytes (n a multiple of emuAlign), or
// false when the arena is full.
func (a *guardArena) alloc(n int) (int, bool) {
	for k, s := range a.free {
		if s.n < n {
			continue
		}
		if s.n == n {
			a.free = append(a.free[:k], a.free[k+1:]...)
		} else {
			a.free[k] = gspan{s.off + n, s.n - n}
		}
		return s.off, true
	}
	off := a.top
	page := syscall.Getpagesize()
	top := (off + n + page - 1) / page * page
	if top > len(a.mem) {
		return 0, false
	}
	a.top = top
	if a.opened > 0 {
		a.protect(syscall.PROT_READ | syscall.PROT_WRITE)
	}
	if top > off+n { // the page's tail is free
		a.release(gspan{off + n, top - off - n})
	}
	return off, true
}

// release returns s to the free spans, merged with its neighbours.
func (a *guardArena) release(s gspan) {
	k := sort.Search(len(a.free), func(i int) bool { return a.free[i].off > s.off })
	a.free = append(a.free, gspan{})
	copy(a.free[k+1:], a.free[k:])
	a.free[k] = s
	if k+1 < len(a.free) && a.free[k].off+a.free[k].n == a.free[k+1].off {
		a.free[k].n += a.free[k+1].n
		a.free = append(a.free[:k+1], a.free[k+2:]...)
	}
	if k > 0 && a.free[k-1].off+a.free[k-1].n == a.free[k].off {
		a.free[k-1].n += a.free[k].n
		a.free = append(a.free[:k], a.free[k+1:]...)
	}
}

// close unmaps the arena.
func (a *guardArena) close() {
	if a.mem != nil {
		syscall.Munmap(a.mem)
		a.mem = nil
	}
}
