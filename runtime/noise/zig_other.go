//go:build !amd64 || purego

package noise

// zigPaths lists the vector fast paths of Generator.Add: none here, zigFastGo
// draws every value.
var zigPaths []zigPath
