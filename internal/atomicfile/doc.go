// Package atomicfile writes a file so that its final name holds either the
// previous content or the complete new one: the data goes to a temporary
// file in the same directory, is synced, and is renamed over the name. A
// full disk, a read-only directory or a crash leaves nothing half-written
// under the final name.
package atomicfile
