// Package sysmem tells how much memory the machine still has for this
// process, so that sizes read from files (models, data) are checked before
// they are allocated.
package sysmem
