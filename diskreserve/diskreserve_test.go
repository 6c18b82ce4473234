package diskreserve

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
	"testing"
)

// TestReserveEnsureRelease: Ensure writes the reserve with its blocks
// allocated (not a sparse file) and leaves a whole one alone; Release
// removes it and counts; a second Release has nothing to free; Ensure
// makes it again.
func TestReserveEnsureRelease(t *testing.T) {
	dir := t.TempDir()
	r := New(dir, 256<<10)
	made, err := r.Ensure()
	if err != nil || !made {
		t.Fatalf("Ensure: made %v, %v", made, err)
	}
	st, err := os.Stat(r.Path())
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != 256<<10 || st.Sys().(*syscall.Stat_t).Blocks*512 < 256<<10 {
		t.Fatalf("reserve: size %d, %d blocks of 512: want 256 KiB allocated", st.Size(), st.Sys().(*syscall.Stat_t).Blocks)
	}
	if made, err := r.Ensure(); err != nil || made {
		t.Fatalf("Ensure over a whole reserve: made %v, %v", made, err)
	}
	if !r.Release() || r.Released() != 1 {
		t.Fatalf("Release: released %d", r.Released())
	}
	if _, err := os.Stat(r.Path()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("reserve after Release: %v", err)
	}
	if r.Release() || r.Released() != 1 {
		t.Fatalf("a second Release freed something: released %d", r.Released())
	}
	if made, err := r.Ensure(); err != nil || !made {
		t.Fatalf("Ensure after Release: made %v, %v", made, err)
	}
}

// TestRoom: a write that would leave less than KeepFree free has no room;
// ErrNoRoom is ENOSPC for errors.Is.
func TestRoom(t *testing.T) {
	dir := t.TempDir()
	free, err := Free(dir)
	if err != nil || free == 0 {
		t.Fatalf("Free: %d, %v", free, err)
	}
	if free > KeepFree+1<<20 && !Room(dir, 1<<20) {
		t.Errorf("no room for 1 MiB with %d bytes free", free)
	}
	if Room(dir, int(free)) {
		t.Errorf("room for %d bytes with %d free: KeepFree not kept", free, free)
	}
	if !errors.Is(ErrNoRoom, syscall.ENOSPC) {
		t.Error("ErrNoRoom is not ENOSPC")
	}
}
