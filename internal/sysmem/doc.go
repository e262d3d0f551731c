// Package sysmem tells how much memory the machine still has for this
// process, so that sizes read from files (models, data) are checked before
// they are allocated, and how much disk a directory's file system has
// for what is put there instead (DiskFree, MapReadOnly).
package sysmem
