//go:build !amd64 || purego

package noise

// zigPaths lists the vector fast paths of gaussianInto: none here, zigDraw
// draws every value.
var zigPaths []zigPath
