package sysmem

import (
	"os"
	"syscall"
)

// FileIdentity returns what tells a file's content changed beyond its
// size and modification time (which a copy can keep): its device and
// inode (another file put in its place) and its status change time in
// nanoseconds (which no one can set back). Zero where fi does not say.
func FileIdentity(fi os.FileInfo) (dev, ino, ctime int64) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, 0
	}
	return int64(st.Dev), int64(st.Ino), st.Ctim.Sec*1e9 + st.Ctim.Nsec
}
