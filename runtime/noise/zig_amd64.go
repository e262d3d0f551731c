//go:build amd64 && !purego

package noise

// zigFastSSE is Generator.Add's fast path four draws at a time with SSE2
// (the amd64 baseline); see zigFastFunc for the contract.
//
//go:noescape
func zigFastSSE(words []uint32, x []float32, tab *[zigLayers][2]uint32, std, post float32, slow []int32) int

// zigFastAVX2 is Generator.Add's fast path eight draws at a time with AVX2
// and POPCNT; see zigFastFunc for the contract. It may also write up to
// eight entries of slow past the count it returns (all within len(words)).
//
//go:noescape
func zigFastAVX2(words []uint32, x []float32, tab *[zigLayers][2]uint32, std, post float32, slow []int32) int

// zigPaths lists the vector fast paths this CPU can run, fastest first.
var zigPaths = func() []zigPath {
	sse := zigPath{name: "sse2", fast: zigFastSSE, lanes: 4}
	if cpuHasAVX2() && cpuHasPOPCNT() {
		return []zigPath{{name: "avx2", fast: zigFastAVX2, lanes: 8}, sse}
	}
	return []zigPath{sse}
}()

// zigSlowLanes[mask] lists the lanes whose bit is set in an 8-bit mask, in
// increasing order (the rest zero): zigFastAVX2 turns the mask of a
// group's rejected lanes into their indices with one load, no branch.
var zigSlowLanes = func() (t [256][8]uint8) {
	for m := range t {
		k := 0
		for l := range 8 {
			if m>>l&1 != 0 {
				t[m][k] = uint8(l)
				k++
			}
		}
	}
	return t
}()
