//go:build linux && (amd64 || arm64)

package cuda

import (
	_ "embed"
	"math"
	"os"
	"strings"
	"testing"
	"unsafe"
)

//go:embed testdata/emu_test.cu
var emuTestSource string

// emuDriver returns the driver the tests run on: the emulation with
// guarded memory (EmulatedGuarded: the Device's host code faults on any
// read of device memory, as on a GPU), or the GPU's driver when
// DPFINETUNE_CUDA=gpu (the same tests then check the kernels as NVRTC
// compiles them). It skips the test when the machine cannot run the
// emulation (no g++).
func emuDriver(t testing.TB) Driver {
	t.Helper()
	if os.Getenv(EnvDriver) == "gpu" {
		d, err := Real()
		if err != nil {
			t.Fatalf("%s=gpu: %v", EnvDriver, err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	d, err := EmulatedGuarded()
	if err != nil {
		t.Skipf("no CUDA emulation here: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// devSlice allocates device memory holding v and registers its release.
func devSlice[T any](t testing.TB, d Driver, v []T) DevicePtr {
	t.Helper()
	var z T
	n := len(v) * int(unsafe.Sizeof(z))
	p, err := d.Alloc(max(n, 1))
	if err != nil {
		t.Fatal(err)
	}
	if n > 0 {
		if err := d.CopyHtoD(p, unsafe.Pointer(&v[0]), n); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// fromDev reads n elements of type T from device memory p.
func fromDev[T any](t testing.TB, d Driver, p DevicePtr, n int) []T {
	t.Helper()
	out := make([]T, n)
	var z T
	if n > 0 {
		if err := d.CopyDtoH(unsafe.Pointer(&out[0]), p, n*int(unsafe.Sizeof(z))); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func loadTestModule(t testing.TB, d Driver) Module {
	t.Helper()
	m, err := d.LoadModule("emu_test.cu", emuTestSource)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func launch(t testing.TB, d Driver, m Module, name string, grid, block Dim3, shared int, a *Args) {
	t.Helper()
	f, err := d.Function(m, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Launch(f, grid, block, shared, a); err != nil {
		t.Fatal(err)
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

func TestEmuIDs(t *testing.T) {
	d := emuDriver(t)
	m := loadTestModule(t, d)
	for _, c := range []struct{ grid, block Dim3 }{
		{D1(1), D1(1)}, {D1(3), D1(5)}, {Dim3{2, 3, 2}, Dim3{4, 2, 3}}, {D1(2), D1(1024)},
	} {
		nt := int(c.block.X * c.block.Y * c.block.Z)
		nb := int(c.grid.X * c.grid.Y * c.grid.Z)
		out := devSlice(t, d, make([]int32, 8*nt*nb))
		launch(t, d, m, "ids", c.grid, c.block, 0, new(Args).Ptr(out))
		got := fromDev[int32](t, d, out, 8*nt*nb)
		k := 0
		for bz := range c.grid.Z {
			for by := range c.grid.Y {
				for bx := range c.grid.X {
					for tz := range c.block.Z {
						for ty := range c.block.Y {
							for tx := range c.block.X {
								want := []int32{int32(tx), int32(ty), int32(tz), int32(bx), int32(by), int32(bz),
									int32(c.block.X*10000 + c.block.Y*100 + c.block.Z), int32(c.grid.X*10000 + c.grid.Y*100 + c.grid.Z)}
								for j, w := range want {
									if got[8*k+j] != w {
										t.Fatalf("grid %v block %v: thread %d field %d = %d, want %d", c.grid, c.block, k, j, got[8*k+j], w)
									}
								}
								k++
							}
						}
					}
				}
			}
		}
	}
}

func TestEmuSharedAndBarrier(t *testing.T) {
	d := emuDriver(t)
	m := loadTestModule(t, d)
	for _, c := range []struct{ n, block int }{{1, 1}, {7, 4}, {1000, 256}, {2048, 1024}, {33, 32}} {
		x := make([]float32, c.n)
		for i := range x {
			x[i] = float32(i)
		}
		p := devSlice(t, d, x)
		grid := (c.n + c.block - 1) / c.block
		launch(t, d, m, "reverse", D1(grid), D1(c.block), 0, new(Args).Ptr(p).I32(int32(c.n)))
		got := fromDev[float32](t, d, p, c.n)
		for i := range got {
			b := i / c.block
			j := b*c.block + (c.block - 1 - i%c.block)
			want := float32(i) // the mirror is outside x: unchanged
			if j < c.n {
				want = float32(j)
			}
			if got[i] != want {
				t.Fatalf("n=%d block=%d: x[%d] = %v, want %v", c.n, c.block, i, got[i], want)
			}
		}
	}
}

func TestEmuDynamicShared(t *testing.T) {
	d := emuDriver(t)
	m := loadTestModule(t, d)
	for _, c := range []struct{ n, block int }{{1, 1}, {100, 8}, {5000, 512}} {
		x := make([]float32, c.n)
		for i := range x {
			x[i] = float32(i % 97)
		}
		grid := (c.n + c.block - 1) / c.block
		p, out := devSlice(t, d, x), devSlice(t, d, make([]float32, grid))
		launch(t, d, m, "block_sum", D1(grid), D1(c.block), 4*c.block, new(Args).Ptr(p).Ptr(out).I32(int32(c.n)))
		got := fromDev[float32](t, d, out, grid)
		for b := range grid {
			var want float32
			for i := b * c.block; i < min(c.n, (b+1)*c.block); i++ {
				want += x[i]
			}
			if got[b] != want {
				t.Fatalf("n=%d block=%d: sum of block %d = %v, want %v", c.n, c.block, b, got[b], want)
			}
		}
	}
}

func TestEmuAtomics(t *testing.T) {
	d := emuDriver(t)
	m := loadTestModule(t, d)
	const grid, block = 3, 200
	ci := devSlice(t, d, []int32{5})
	cu := devSlice(t, d, []uint32{0})
	cull := devSlice(t, d, []uint64{1})
	cf := devSlice(t, d, []float32{0})
	cd := devSlice(t, d, []float64{0})
	cas := devSlice(t, d, []int32{0})
	mx := devSlice(t, d, []int32{-1})
	ex := devSlice(t, d, []int32{-1})
	launch(t, d, m, "atomics", D1(grid), D1(block), 0, new(Args).Ptr(ci).Ptr(cu).Ptr(cull).Ptr(cf).Ptr(cd).Ptr(cas).Ptr(mx).Ptr(ex))
	n := grid * block
	if g := fromDev[int32](t, d, ci, 1)[0]; g != int32(5+n) {
		t.Errorf("atomicAdd(int): %d, want %d", g, 5+n)
	}
	if g := fromDev[uint32](t, d, cu, 1)[0]; g != uint32(2*n) {
		t.Errorf("atomicAdd(unsigned): %d, want %d", g, 2*n)
	}
	if g := fromDev[uint64](t, d, cull, 1)[0]; g != uint64(1+3*n) {
		t.Errorf("atomicAdd(unsigned long long): %d, want %d", g, 1+3*n)
	}
	if g := fromDev[float32](t, d, cf, 1)[0]; g != float32(n)/2 {
		t.Errorf("atomicAdd(float): %v, want %v", g, float32(n)/2)
	}
	if g := fromDev[float64](t, d, cd, 1)[0]; g != float64(n)/4 {
		t.Errorf("atomicAdd(double): %v, want %v", g, float64(n)/4)
	}
	if g := fromDev[int32](t, d, cas, 1)[0]; g != int32(n) {
		t.Errorf("atomicCAS increments: %d, want %d", g, n)
	}
	if g := fromDev[int32](t, d, mx, 1)[0]; g != int32(n-1) {
		t.Errorf("atomicMax: %d, want %d", g, n-1)
	}
	if g := fromDev[int32](t, d, ex, 1)[0]; g < 0 || g >= int32(n) {
		t.Errorf("atomicExch: %d, not a thread's id", g)
	}
}

func TestEmuShuffles(t *testing.T) {
	d := emuDriver(t)
	m := loadTestModule(t, d)
	const grid, block = 2, 64
	n := grid * block
	x := make([]int32, n)
	for i := range x {
		x[i] = int32(i*7%31 + 1)
	}
	px := devSlice(t, d, x)
	down, bfly, bcast, down8 := devSlice(t, d, make([]int32, n)), devSlice(t, d, make([]int32, n)), devSlice(t, d, make([]int32, n)), devSlice(t, d, make([]int32, n))
	dx := devSlice(t, d, make([]float64, n))
	launch(t, d, m, "shuffles", D1(grid), D1(block), 0, new(Args).Ptr(px).Ptr(down).Ptr(bfly).Ptr(bcast).Ptr(down8).Ptr(dx))
	gDown, gBfly, gBcast, gDown8 := fromDev[int32](t, d, down, n), fromDev[int32](t, d, bfly, n), fromDev[int32](t, d, bcast, n), fromDev[int32](t, d, down8, n)
	gDx := fromDev[float64](t, d, dx, n)
	for w := 0; w < n/32; w++ {
		lanes := x[32*w : 32*w+32]
		var sum int32
		for _, v := range lanes {
			sum += v
		}
		// The down-shuffle reduction, replayed with CUDA's rule (a lane
		// beyond the warp reads its own value).
		s := append([]int32(nil), lanes...)
		for k := 16; k > 0; k /= 2 {
			next := make([]int32, 32)
			for l := range 32 {
				src := l
				if l+k < 32 {
					src = l + k
				}
				next[l] = s[l] + s[src]
			}
			s = next
		}
		for l := range 32 {
			i := 32*w + l
			if gDown[i] != s[l] {
				t.Errorf("warp %d lane %d: __shfl_down_sync reduction %d, want %d", w, l, gDown[i], s[l])
			}
			if gBfly[i] != sum {
				t.Errorf("warp %d lane %d: __shfl_xor_sync butterfly %d, want %d", w, l, gBfly[i], sum)
			}
			if gBcast[i] != lanes[3] {
				t.Errorf("warp %d lane %d: __shfl_sync from lane 3: %d, want %d", w, l, gBcast[i], lanes[3])
			}
			want8 := lanes[l]
			if l%8+2 < 8 {
				want8 = lanes[l+2]
			}
			if gDown8[i] != want8 {
				t.Errorf("warp %d lane %d: width-8 __shfl_down_sync %d, want %d", w, l, gDown8[i], want8)
			}
			if want := float64(lanes[l^1]) + 0.5; gDx[i] != want {
				t.Errorf("warp %d lane %d: double __shfl_xor_sync %v, want %v", w, l, gDx[i], want)
			}
		}
	}
	if gDown[0] != gBfly[0] {
		t.Errorf("lane 0's reductions differ: %d %d", gDown[0], gBfly[0])
	}
	// A block of 40 threads: its second warp has 8 lanes, whose shuffles
	// must not wait for the 24 lanes it lacks; the first warp is whole.
	launch(t, d, m, "shuffles", D1(1), D1(40), 0, new(Args).Ptr(px).Ptr(down).Ptr(bfly).Ptr(bcast).Ptr(down8).Ptr(dx))
	var sum int32
	for _, v := range x[:32] {
		sum += v
	}
	if g := fromDev[int32](t, d, bfly, 1)[0]; g != sum {
		t.Errorf("block of 40: the first warp's butterfly sum %d, want %d", g, sum)
	}
}

// TestEmuWarpSum holds the emulation's one-exchange warp sum
// (emu_warp_sum, common.cuh's warp_sum there) to the shuffle loop it
// stands for, bit for bit in every lane, in double and float, on whole
// warps and on a block of 40 threads (a warp of 8 lanes).
func TestEmuWarpSum(t *testing.T) {
	d := emuDriver(t)
	m := loadTestModule(t, d)
	const n = 128
	x := make([]int32, n)
	for i := range x {
		x[i] = int32(i*7%31 + 1)
	}
	px := devSlice(t, d, x)
	for _, block := range []int{64, 40} {
		fast, loop := devSlice(t, d, make([]float64, n)), devSlice(t, d, make([]float64, n))
		fastf, loopf := devSlice(t, d, make([]float32, n)), devSlice(t, d, make([]float32, n))
		launch(t, d, m, "warp_sums", D1(1), D1(block), 0, new(Args).Ptr(px).Ptr(fast).Ptr(loop).Ptr(fastf).Ptr(loopf))
		gf, gl := fromDev[float64](t, d, fast, block), fromDev[float64](t, d, loop, block)
		gff, glf := fromDev[float32](t, d, fastf, block), fromDev[float32](t, d, loopf, block)
		for i := 0; i < block; i++ {
			if math.Float64bits(gf[i]) != math.Float64bits(gl[i]) || math.Float32bits(gff[i]) != math.Float32bits(glf[i]) {
				t.Errorf("block of %d, thread %d: warp sum %v / %v, shuffle loop %v / %v", block, i, gf[i], gff[i], gl[i], glf[i])
			}
		}
		if block == 64 {
			var want float64
			for _, v := range x[:32] {
				want += float64(v) * 0.1
			}
			if !(math.Abs(gf[0]-want) <= 1e-12*want) { // NaN fails too
				t.Errorf("lane 0's warp sum %v, want about %v", gf[0], want)
			}
		}
	}
}

func TestEmuBitsAndMath(t *testing.T) {
	d := emuDriver(t)
	m := loadTestModule(t, d)
	x := []float32{1, 2, 0.25, 3e-38, 1e30, float32(math.Pi), 80}
	n := len(x)
	px := devSlice(t, d, x)
	u, back, rs, sq := devSlice(t, d, make([]uint32, n)), devSlice(t, d, make([]float32, n)), devSlice(t, d, make([]float32, n)), devSlice(t, d, make([]float32, n))
	ex, lg, db := devSlice(t, d, make([]float32, n)), devSlice(t, d, make([]float32, n)), devSlice(t, d, make([]float64, n))
	launch(t, d, m, "bits", D1(1), D1(n), 0, new(Args).Ptr(px).Ptr(u).Ptr(back).Ptr(rs).Ptr(sq).Ptr(ex).Ptr(lg).Ptr(db))
	gu, gb, grs, gsq := fromDev[uint32](t, d, u, n), fromDev[float32](t, d, back, n), fromDev[float32](t, d, rs, n), fromDev[float32](t, d, sq, n)
	gex, glg, gdb := fromDev[float32](t, d, ex, n), fromDev[float32](t, d, lg, n), fromDev[float64](t, d, db, n)
	// ulps is the distance in units in the last place of float32.
	ulps := func(a, b float32) int64 {
		d := int64(math.Float32bits(a)) - int64(math.Float32bits(b))
		if d < 0 {
			d = -d
		}
		return d
	}
	for i, v := range x {
		if gu[i] != math.Float32bits(v) || gb[i] != v || gdb[i] != float64(v) {
			t.Errorf("bit casts of %v: %#x %v %v", v, gu[i], gb[i], gdb[i])
		}
		s := float32(math.Sqrt(float64(v)))
		// sqrtf is correctly rounded (no fast math); rsqrtf is within 2
		// ulp on a GPU (CUDA's bound), exact in the emulation.
		if gsq[i] != s || ulps(grs[i], 1/s) > 2 {
			t.Errorf("sqrtf/rsqrtf(%v) = %v %v, want %v %v", v, gsq[i], grs[i], s, 1/s)
		}
		// CUDA's expf and logf are within 2 and 1 ulp (no fast math).
		if e := float32(math.Exp(-float64(v))); ulps(gex[i], e) > 2 {
			t.Errorf("expf(-%v) = %v, want %v", v, gex[i], e)
		}
		if l := float32(math.Log(float64(v))); ulps(glg[i], l) > 1 {
			t.Errorf("logf(%v) = %v, want %v", v, glg[i], l)
		}
	}
}

func TestEmuErrors(t *testing.T) {
	d := emuDriver(t)
	_, err := d.LoadModule("broken.cu", "extern \"C\" __global__ void broken(float *x) {\n  x[0] = undefined_name;\n}\n")
	if err == nil || !strings.Contains(err.Error(), "undefined_name") || !strings.Contains(err.Error(), "broken.cu") {
		t.Errorf("compile error: %v, want the compiler's message naming broken.cu and undefined_name", err)
	}
	m := loadTestModule(t, d)
	if _, err := d.Function(m, "nope"); err == nil {
		t.Error("lookup of a missing kernel succeeded")
	}
	f, err := d.Function(m, "ids")
	if err != nil {
		t.Fatal(err)
	}
	p := devSlice(t, d, make([]int32, 8))
	if err := d.Launch(f, D1(1), D1(2048), 0, new(Args).Ptr(p)); err == nil {
		t.Error("a block of 2048 threads launched")
	}
	if err := d.Launch(f, D1(0), D1(1), 0, new(Args).Ptr(p)); err == nil {
		t.Error("an empty grid launched")
	}
	var host [4]byte
	if err := d.CopyDtoH(unsafe.Pointer(&host[0]), p+32, 4); err == nil {
		t.Error("a copy beyond an allocation succeeded")
	}
	if err := d.Free(p + 4); err == nil {
		t.Error("free of a non-allocation succeeded")
	}
	var a Args
	for range maxArgSlots {
		a.U64(1)
	}
	if err := d.Launch(f, D1(1), D1(1), 0, a.U64(2)); err == nil {
		t.Error("a launch with too many arguments succeeded")
	}
	// A double* argument 4 bytes off its alignment: the GPU faults, the
	// emulation refuses (the real driver's own check is the GPU's).
	if os.Getenv(EnvDriver) != "gpu" {
		bits, err := d.Function(m, "bits")
		if err != nil {
			t.Fatal(err)
		}
		fs, ds := devSlice(t, d, make([]float32, 8)), devSlice(t, d, make([]float64, 4))
		args := func(db DevicePtr) *Args {
			return new(Args).Ptr(fs).Ptr(fs).Ptr(fs).Ptr(fs).Ptr(fs).Ptr(fs).Ptr(fs).Ptr(db)
		}
		if err := d.Launch(bits, D1(1), D1(1), 0, args(ds)); err != nil {
			t.Fatalf("aligned launch: %v", err)
		}
		if err := d.Launch(bits, D1(1), D1(1), 0, args(ds+4)); err == nil || !strings.Contains(err.Error(), "aligned") {
			t.Errorf("a misaligned double* launched: %v", err)
		}
	}
}
