package zoo

import (
	"fmt"
	"math"
)

// Vision transformers: torchvision's VisionTransformer, and timm's
// VisionTransformer (ViT, DeiT), BEiT and CrossViT as of timm 0.5/0.6 (the
// versions the paper used).

// vitCfg sizes a plain ViT.
type vitCfg struct {
	patch, depth, heads, dim, mlp int64
}

// maxInt64 is the "to the end" bound torch writes for x[:, 1:].
const maxInt64 = math.MaxInt64

func init() {
	register(&spec{
		Info: Info{Name: "vit_b_16", Description: "torchvision vit_b_16: ViT-Base/16 (12 layers, 12 heads, dim 768, MLP 3072); " +
			"nn.MultiheadAttention exported as torch does (sequence-first, packed in_proj MatMul, out_proj Gemm)",
			DefaultInput: imagenet, DefaultClasses: 1000},
		build: func(b *builder, x tensor, k int64) tensor { return tvViT(b, x, k, vitCfg{16, 12, 12, 768, 3072}) },
		check: squareDivisible(16, "torchvision's VisionTransformer"),
	})
	register(&spec{
		Info: Info{Name: "vit-tiny-cifar", Description: "benchmark vit-tiny-cifar (DESIGN.md §7): torchvision VisionTransformer(image_size 32, " +
			"patch 4, 4 layers, 3 heads, dim 192, MLP 768), 10 classes",
			DefaultInput: cifar, DefaultClasses: 10},
		build: func(b *builder, x tensor, k int64) tensor { return tvViT(b, x, k, vitCfg{4, 4, 3, 192, 768}) },
		check: squareDivisible(4, "torchvision's VisionTransformer"),
	})
	for _, v := range []struct {
		size string
		cfg  vitCfg
	}{
		{"tiny", vitCfg{16, 12, 3, 192, 768}},
		{"small", vitCfg{16, 12, 6, 384, 1536}},
		{"base", vitCfg{16, 12, 12, 768, 3072}},
	} {
		desc := fmt.Sprintf("timm %%s: ViT-%s/16 (12 blocks, %d heads, dim %d, MLP %d), class-token head; "+
			"attention as timm writes it (qkv Linear, heads split by Gather)", v.size, v.cfg.heads, v.cfg.dim, v.cfg.mlp)
		for _, fam := range []string{"vit", "deit"} {
			name := fam + "_" + v.size + "_patch16_224"
			d := fmt.Sprintf(desc, name)
			if fam == "deit" {
				d += "; the same module as vit_" + v.size + "_patch16_224 (DeiT differs only in its pretrained weights)"
			}
			register(&spec{
				Info:  Info{Name: name, Description: d, DefaultInput: imagenet, DefaultClasses: 1000},
				build: func(b *builder, x tensor, k int64) tensor { return timmViT(b, x, k, v.cfg) },
				check: squareDivisible(16, "this ViT"),
			})
		}
	}
	for _, v := range []struct {
		name string
		cfg  vitCfg
		init float64
	}{
		{"beit_base_patch16_224", vitCfg{16, 12, 12, 768, 3072}, 0.1},
		{"beit_large_patch16_224", vitCfg{16, 24, 16, 1024, 4096}, 1e-5},
	} {
		register(&spec{
			Info: Info{Name: v.name, Description: fmt.Sprintf("timm %s: BEiT (%d blocks, %d heads, dim %d), per-block relative position "+
				"bias tables behind Gather, q/v biases as Concat(q_bias, 0, v_bias), layer scale %g, mean-pooled tokens + LayerNorm head",
				v.name, v.cfg.depth, v.cfg.heads, v.cfg.dim, v.init),
				DefaultInput: imagenet, DefaultClasses: 1000},
			build: func(b *builder, x tensor, k int64) tensor { return beit(b, x, k, v.cfg, v.init) },
			check: squareDivisible(16, "BEiT"),
		})
	}
	for _, c := range []crossCfg{
		{"crossvit_tiny_240", [2]int64{96, 192}, [2]int64{3, 3}, 4, 4},
		{"crossvit_small_240", [2]int64{192, 384}, [2]int64{6, 6}, 4, 4},
		{"crossvit_base_240", [2]int64{384, 768}, [2]int64{12, 12}, 4, 4},
		{"crossvit_9_240", [2]int64{128, 256}, [2]int64{4, 4}, 3, 3},
		{"crossvit_15_240", [2]int64{192, 384}, [2]int64{6, 6}, 5, 3},
		{"crossvit_18_240", [2]int64{224, 448}, [2]int64{7, 7}, 6, 3},
	} {
		register(&spec{
			Info: Info{Name: c.name, Description: fmt.Sprintf("timm %s: CrossViT, branches of patch 12 (dim %d) and 16 (dim %d, on the "+
				"input resized by 224/240 with bicubic interpolation, written as two MatMuls with constant matrices), 3 multi-scale "+
				"blocks of 1 and %d ViT blocks with class-token cross-attention, heads averaged", c.name, c.dims[0], c.dims[1], c.depth),
				DefaultInput: []int64{3, 240, 240}, DefaultClasses: 1000},
			build: func(b *builder, x tensor, k int64) tensor { return crossViT(b, x, k, c) },
			check: crossCheck,
		})
	}
}

// squareDivisible checks a square input whose side the patch divides.
func squareDivisible(patch int64, what string) func([]int64) error {
	return func(s []int64) error {
		if s[1] != s[2] {
			return fmt.Errorf("%s needs a square image, got %d×%d", what, s[1], s[2])
		}
		if s[1] < patch || s[1]%patch != 0 {
			return fmt.Errorf("%s needs an image side divisible by the patch size %d, got %d", what, patch, s[1])
		}
		return nil
	}
}

// patchTokens is a patch-embedding conv's output (B, D, h, w) flattened to
// tokens (B, h·w, D): Reshape then Transpose.
func (b *builder) patchTokens(p tensor) tensor {
	h, w := p.hw()
	d := p.channels()
	t := b.reshape(p, []int64{-1, d, h * w}, 0, d, h*w)
	return b.transpose(t, 0, 2, 1)
}

// --- torchvision VisionTransformer ---

// tvViT is torchvision's VisionTransformer (dropout 0) with its init:
// conv_proj trunc_normal(std √(1/fan_in)), zero class token, position
// embedding N(0, 0.02), MLP xavier_uniform weights and N(0, 1e-6) biases,
// in_proj xavier_uniform with zero bias, out_proj PyTorch default weight
// and zero bias, and a zero head.
func tvViT(b *builder, x tensor, classes int64, c vitCfg) tensor {
	fanIn := x.channels() * c.patch * c.patch
	cw, z := truncNormal(math.Sqrt(1/float64(fanIn)), -2, 2), zeros()
	p := b.conv(x, "conv_proj", convSpec{out: c.dim, k: c.patch, stride: c.patch, bias: true, weight: &cw, biasInit: &z})
	tok := b.patchTokens(p)
	cls := b.param("class_token", []int64{1, 1, c.dim}, zeros(), kindParam)
	x = b.concat(1, b.expandBatch(cls, tok), tok)
	b.in(func() {
		pos := b.param("pos_embedding", []int64{1, x.shape[1], c.dim}, normal(0.02), kindParam)
		x = b.add(x, pos)
		b.in(func() {
			for i := int64(0); i < c.depth; i++ {
				b.in(func() { x = tvEncoderBlock(b, x, c) }, fmt.Sprintf("encoder_layer_%d", i))
			}
		}, "layers")
		x = b.layerNorm(x, "ln", 1e-6)
	}, "encoder")
	x = b.gatherIndex(x, 1, 0)
	return b.in1("heads", func() tensor {
		return b.gemm(x, "head", linearSpec{out: classes, weight: &z, biasInit: &z})
	})
}

// tvEncoderBlock is torchvision's EncoderBlock: x + MHA(ln_1(x)), then
// that + MLP(ln_2(·)).
func tvEncoderBlock(b *builder, in tensor, c vitCfg) tensor {
	x := b.layerNorm(in, "ln_1", 1e-6)
	b.in(func() { x = tvMHA(b, x, c) }, "self_attention")
	x = b.add(x, in)
	y := b.layerNorm(x, "ln_2", 1e-6)
	xw, bn := xavierUniform(c.dim, c.mlp), normal(1e-6)
	b.in(func() {
		y = b.linear(y, "0", linearSpec{out: c.mlp, weight: &xw, biasInit: &bn})
		y = b.gelu(y)
		xw2 := xavierUniform(c.mlp, c.dim)
		y = b.linear(y, "3", linearSpec{out: c.dim, weight: &xw2, biasInit: &bn})
	}, "mlp")
	return b.add(x, y)
}

// tvMHA is nn.MultiheadAttention(batch_first=True) on (B, T, D) in the
// form torch 1.13 exports F.multi_head_attention_forward: tokens go
// sequence-first, one MatMul with the packed, transposed in_proj weight,
// three Slices, per-head Reshape/Transpose to (B·H, T, hd), q / √hd,
// softmax(q kᵀ) v, back to (T·B, D) for the out_proj Gemm, and back to
// (B, T, D). Reshape targets hold T and hd and infer B·H, so the graph is
// valid for any batch.
func tvMHA(b *builder, x tensor, c vitCfg) tensor {
	T, D, H := x.shape[1], c.dim, c.heads
	hd := D / H
	x = b.transpose(x, 1, 0, 2) // (T, B, D)
	w := b.paramT("in_proj_weight", []int64{D, 3 * D}, xavierUniform(D, 3*D), kindParam, true)
	// paramT named it in_proj_weight.T; the bias is in_proj_bias.
	mm := b.op1("MatMul", []int64{T, -1, 3 * D}, []string{x.name, w.name})
	bias := b.param("in_proj_bias", []int64{3 * D}, zeros(), kindParam)
	qkv := b.op1("Add", mm.shape, []string{bias.name, mm.name})
	q := b.sliceAxis(qkv, -1, 0, D)
	k := b.sliceAxis(qkv, -1, D, 2*D)
	v := b.sliceAxis(qkv, -1, 2*D, 3*D)
	q = b.transpose(b.reshape(q, []int64{T, -1, hd}, T, -1, hd), 1, 0, 2)
	k = b.reshape(k, []int64{T, -1, hd}, T, -1, hd)
	v = b.transpose(b.reshape(v, []int64{T, -1, hd}, T, -1, hd), 1, 0, 2)
	sq := b.scalar(float32(math.Sqrt(float64(hd))))
	q = b.op1("Div", q.shape, []string{q.name, sq.name})
	kt := b.transpose(k, 1, 2, 0) // (B·H, hd, T)
	att := b.softmax(b.matmul(q, kt))
	o := b.matmul(att, v)       // (B·H, T, hd)
	o = b.transpose(o, 1, 0, 2) // (T, B·H, hd)
	o = b.reshape(o, []int64{-1, D}, -1, D)
	o = b.gemm(o, "out_proj", linearSpec{out: D, biasInit: ptr(zeros())})
	o = b.reshape(o, []int64{T, -1, D}, T, -1, D)
	return b.transpose(o, 1, 0, 2)
}

func ptr[T any](v T) *T { return &v }

// --- timm VisionTransformer (ViT, DeiT) ---

// timmViT is timm's VisionTransformer with class-token pooling and timm's
// init: Linear trunc_normal(0.02) with zero bias, position embedding
// trunc_normal(0.02), class token N(0, 1e-6), patch conv PyTorch default.
func timmViT(b *builder, x tensor, classes int64, c vitCfg) tensor {
	var tok tensor
	b.in(func() {
		tok = b.patchTokens(b.conv(x, "proj", convSpec{out: c.dim, k: c.patch, stride: c.patch, bias: true}))
	}, "patch_embed")
	cls := b.param("cls_token", []int64{1, 1, c.dim}, normal(1e-6), kindParam)
	x = b.concat(1, b.expandBatch(cls, tok), tok)
	pos := b.param("pos_embed", []int64{1, x.shape[1], c.dim}, timmTrunc(0.02), kindParam)
	x = b.add(x, pos)
	b.in(func() {
		for i := int64(0); i < c.depth; i++ {
			b.in(func() { x = timmBlock(b, x, c.heads, c.mlp) }, fmt.Sprint(i))
		}
	}, "blocks")
	x = b.layerNorm(x, "norm", 1e-6)
	x = b.gatherIndex(x, 1, 0)
	return b.gemm(x, "head", timmLinear(classes))
}

// timmLinear is an nn.Linear with timm's init (trunc_normal(0.02), zero
// bias).
func timmLinear(out int64) linearSpec {
	return linearSpec{out: out, weight: ptr(timmTrunc(0.02)), biasInit: ptr(zeros())}
}

// timmBlock is timm's ViT Block: x + attn(norm1(x)), then that +
// mlp(norm2(·)).
func timmBlock(b *builder, x tensor, heads, mlp int64) tensor {
	n := b.layerNorm(x, "norm1", 1e-6)
	b.in(func() { n = timmAttention(b, n, heads) }, "attn")
	x = b.add(x, n)
	m := b.layerNorm(x, "norm2", 1e-6)
	b.in(func() { m = timmMLP(b, m, mlp) }, "mlp")
	return b.add(x, m)
}

// timmMLP is fc1, GELU, fc2.
func timmMLP(b *builder, x tensor, hidden int64) tensor {
	d := x.shape[len(x.shape)-1]
	x = b.gelu(b.linear(x, "fc1", timmLinear(hidden)))
	return b.linear(x, "fc2", timmLinear(d))
}

// timmAttention is timm's Attention as of 0.5: qkv Linear, reshape to
// (B, N, 3, H, hd), permute to (3, B, H, N, hd), q, k, v = qkv[0], qkv[1],
// qkv[2] (Gather), softmax(q kᵀ · scale) v, proj Linear.
func timmAttention(b *builder, x tensor, heads int64) tensor {
	N, D := x.shape[1], x.shape[2]
	qkv := b.linear(x, "qkv", timmLinear(3*D))
	q, k, v := splitHeads(b, qkv, N, D, heads)
	att := b.matmul(q, b.transpose(k, 0, 1, 3, 2))
	sc := b.scalar(float32(math.Pow(float64(D/heads), -0.5)))
	att = b.op1("Mul", att.shape, []string{att.name, sc.name})
	return mergeHeads(b, b.softmax(att), v, N, D, timmLinear(D))
}

// splitHeads reshapes packed (B, N, 3D) projections to q, k, v of shape
// (B, H, N, hd).
func splitHeads(b *builder, qkv tensor, N, D, H int64) (q, k, v tensor) {
	hd := D / H
	r := b.reshape(qkv, []int64{-1, N, 3, H, hd}, 0, N, 3, H, hd)
	t := b.transpose(r, 2, 0, 3, 1, 4)
	return b.gatherIndex(t, 0, 0), b.gatherIndex(t, 0, 1), b.gatherIndex(t, 0, 2)
}

// mergeHeads is (attn @ v).transpose(1, 2).reshape(B, N, D) and the proj
// Linear.
func mergeHeads(b *builder, att, v tensor, N, D int64, proj linearSpec) tensor {
	o := b.matmul(att, v)
	o = b.transpose(o, 0, 2, 1, 3)
	o = b.reshape(o, []int64{-1, N, D}, 0, N, D)
	return b.linear(o, "proj", proj)
}

// --- BEiT ---

// beit is timm's Beit with use_abs_pos_emb=False, use_rel_pos_bias=True
// (one table per block), use_mean_pooling=True, qkv_bias=True and layer
// scale init: Linear trunc_normal(0.02) with zero bias, class token
// trunc_normal(0.02), zero q/v biases and relative position tables, attn.proj
// and mlp.fc2 weights divided by √(2·layer), the head scaled by 0.001.
func beit(b *builder, x tensor, classes int64, c vitCfg, initValues float64) tensor {
	var tok tensor
	var grid int64
	b.in(func() {
		p := b.conv(x, "proj", convSpec{out: c.dim, k: c.patch, stride: c.patch, bias: true})
		grid = p.shape[2]
		tok = b.patchTokens(p)
	}, "patch_embed")
	cls := b.param("cls_token", []int64{1, 1, c.dim}, timmTrunc(0.02), kindParam)
	x = b.concat(1, b.expandBatch(cls, tok), tok)
	index := relativePositionIndex(grid, grid)
	b.in(func() {
		for i := int64(0); i < c.depth; i++ {
			b.in(func() { x = beitBlock(b, x, c, initValues, i+1, index, grid) }, fmt.Sprint(i))
		}
	}, "blocks")
	// norm is Identity with mean pooling; fc_norm normalizes the mean of
	// the patch tokens.
	t := b.sliceAxis(x, 1, 1, maxInt64)
	m := b.op1("ReduceMean", []int64{-1, c.dim}, []string{t.name}, attrInts("axes", 1), attrInt("keepdims", 0))
	m = b.layerNorm(m, "fc_norm", 1e-6)
	return b.gemm(m, "head", linearSpec{out: classes, weight: ptr(timmTrunc(0.02).scaled(0.001)), biasInit: ptr(zeros())})
}

func beitBlock(b *builder, x tensor, c vitCfg, initValues float64, layer int64, index []int64, grid int64) tensor {
	rescale := 1 / math.Sqrt(2*float64(layer))
	n := b.layerNorm(x, "norm1", 1e-6)
	b.in(func() { n = beitAttention(b, n, c.heads, index, grid, rescale) }, "attn")
	g1 := b.param("gamma_1", []int64{c.dim}, constant(initValues), kindParam)
	x = b.add(x, b.mul(g1, n))
	m := b.layerNorm(x, "norm2", 1e-6)
	b.in(func() {
		m = b.gelu(b.linear(m, "fc1", timmLinear(c.mlp)))
		fc2 := timmLinear(c.dim)
		fc2.weight = ptr(fc2.weight.scaled(rescale))
		m = b.linear(m, "fc2", fc2)
	}, "mlp")
	g2 := b.param("gamma_2", []int64{c.dim}, constant(initValues), kindParam)
	return b.add(x, b.mul(g2, m))
}

// beitAttention is timm's BEiT Attention: F.linear(x, qkv.weight,
// cat(q_bias, zeros, v_bias)), q·scale, q kᵀ + relative position bias
// (table[index] reshaped to (H, N, N)), softmax, proj.
func beitAttention(b *builder, x tensor, heads int64, index []int64, grid int64, rescale float64) tensor {
	N, D := x.shape[1], x.shape[2]
	w := b.paramT("qkv.weight", []int64{D, 3 * D}, timmTrunc(0.02), kindParam, true)
	qb := b.param("q_bias", []int64{D}, zeros(), kindParam)
	kb := b.constFloats([]int64{D}, make([]float32, D)...)
	vb := b.param("v_bias", []int64{D}, zeros(), kindParam)
	bias := b.concat(0, qb, kb, vb)
	mm := b.op1("MatMul", []int64{-1, N, 3 * D}, []string{x.name, w.name})
	qkv := b.op1("Add", mm.shape, []string{bias.name, mm.name})
	q, k, v := splitHeads(b, qkv, N, D, heads)
	sc := b.scalar(float32(math.Pow(float64(D/heads), -0.5)))
	q = b.op1("Mul", q.shape, []string{q.name, sc.name})
	att := b.matmul(q, b.transpose(k, 0, 1, 3, 2))
	// Relative position bias: table (num_relative_distance, H) gathered by
	// the (N, N) index buffer.
	dist := (2*grid-1)*(2*grid-1) + 3
	table := b.param("relative_position_bias_table", []int64{dist, heads}, zeros(), kindParam)
	idx := b.intInit("relative_position_index", []int64{N, N}, index)
	flat := b.reshape(idx, []int64{N * N}, -1)
	g := b.op1("Gather", []int64{N * N, heads}, []string{table.name, flat.name}, attrInt("axis", 0))
	rb := b.reshape(g, []int64{N, N, heads}, N, N, -1)
	rb = b.transpose(rb, 2, 0, 1)
	ax := b.constVec(0)
	rb = b.op1("Unsqueeze", []int64{1, heads, N, N}, []string{rb.name, ax.name})
	att = b.add(att, rb)
	proj := timmLinear(D)
	proj.weight = ptr(proj.weight.scaled(rescale))
	return mergeHeads(b, b.softmax(att), v, N, D, proj)
}

// relativePositionIndex is BEiT's relative_position_index buffer for a
// gh×gw patch grid plus the class token: (gh·gw+1)² indices into a table of
// (2gh-1)(2gw-1)+3 rows, the last three for class-token pairs.
func relativePositionIndex(gh, gw int64) []int64 {
	n := gh * gw
	dist := (2*gh-1)*(2*gw-1) + 3
	N := n + 1
	idx := make([]int64, N*N)
	for i := int64(0); i < n; i++ {
		hi, wi := i/gw, i%gw
		for j := int64(0); j < n; j++ {
			hj, wj := j/gw, j%gw
			idx[(i+1)*N+j+1] = (hi-hj+gh-1)*(2*gw-1) + (wi - wj + gw - 1)
		}
	}
	for j := int64(0); j < N; j++ {
		idx[j] = dist - 3
	}
	for i := int64(0); i < N; i++ {
		idx[i*N] = dist - 2
	}
	idx[0] = dist - 1
	return idx
}

// --- CrossViT ---

// crossCfg sizes a timm CrossViT with patches (12, 16), image scales
// (1, 224/240), three multi-scale blocks of (1, depth) ViT blocks and one
// cross-attention per branch, MLP ratios (mlp, mlp).
type crossCfg struct {
	name  string
	dims  [2]int64
	heads [2]int64
	depth int64
	mlp   int64
}

var crossPatches = [2]int64{12, 16}

// crossSizes returns the image side each branch sees: timm's
// int(side · scale) with scales (1, 224/240).
func crossSizes(side int64) [2]int64 {
	return [2]int64{side, int64(float64(side) * (224.0 / 240.0))}
}

func crossCheck(s []int64) error {
	if s[1] != s[2] {
		return fmt.Errorf("CrossViT needs a square image, got %d×%d", s[1], s[2])
	}
	sz := crossSizes(s[1])
	for i, p := range crossPatches {
		if sz[i] < p {
			return fmt.Errorf("too small: branch %d sees %d×%d pixels, less than its %d-pixel patch", i, sz[i], sz[i], p)
		}
	}
	return nil
}

// crossViT is timm's CrossVit (class-token pooling): Linear
// trunc_normal(0.02) with zero bias, position embeddings and class tokens
// trunc_normal(0.02), patch convs PyTorch default.
func crossViT(b *builder, x tensor, classes int64, c crossCfg) tensor {
	side := x.shape[2]
	sizes := crossSizes(side)
	var xs [2]tensor
	for i := 0; i < 2; i++ {
		xi := x
		if sizes[i] != side {
			xi = b.in1("resize", func() tensor { return b.bicubicResize(x, sizes[i]) })
		}
		var tok tensor
		b.in(func() {
			tok = b.patchTokens(b.conv(xi, "proj", convSpec{out: c.dims[i], k: crossPatches[i], stride: crossPatches[i], bias: true}))
		}, "patch_embed", fmt.Sprint(i))
		cls := b.param(fmt.Sprintf("cls_token_%d", i), []int64{1, 1, c.dims[i]}, timmTrunc(0.02), kindParam)
		t := b.concat(1, b.expandBatch(cls, tok), tok)
		pos := b.param(fmt.Sprintf("pos_embed_%d", i), []int64{1, t.shape[1], c.dims[i]}, timmTrunc(0.02), kindParam)
		xs[i] = b.add(t, pos)
	}
	b.in(func() {
		for j := 0; j < 3; j++ {
			b.in(func() { xs = multiScaleBlock(b, xs, c) }, fmt.Sprint(j))
		}
	}, "blocks")
	var logits [2]tensor
	for i := 0; i < 2; i++ {
		xs[i] = b.in1("norm", func() tensor { return b.layerNorm(xs[i], fmt.Sprint(i), 1e-6) })
	}
	for i := 0; i < 2; i++ {
		cls := b.gatherIndex(xs[i], 1, 0)
		logits[i] = b.in1("head", func() tensor { return b.gemm(cls, fmt.Sprint(i), timmLinear(classes)) })
	}
	// torch.mean(torch.stack(heads, 0), 0)
	var st [2]tensor
	for i := range logits {
		ax := b.constVec(0)
		st[i] = b.op1("Unsqueeze", []int64{1, -1, classes}, []string{logits[i].name, ax.name})
	}
	s := b.concat(0, st[0], st[1])
	return b.op1("ReduceMean", []int64{-1, classes}, []string{s.name}, attrInts("axes", 0), attrInt("keepdims", 0))
}

// multiScaleBlock is timm's MultiScaleBlock with depth (1, c.depth, 0).
func multiScaleBlock(b *builder, xs [2]tensor, c crossCfg) [2]tensor {
	depth := [2]int64{1, c.depth}
	var outs [2]tensor
	b.in(func() {
		for d := 0; d < 2; d++ {
			b.in(func() {
				for j := int64(0); j < depth[d]; j++ {
					b.in(func() { xs[d] = timmBlock(b, xs[d], c.heads[d], c.dims[d]*c.mlp) }, fmt.Sprint(j))
				}
			}, fmt.Sprint(d))
		}
	}, "blocks")
	// Project each branch's class token into the other branch's width.
	var proj [2]tensor
	b.in(func() {
		for d := 0; d < 2; d++ {
			b.in(func() {
				t := b.sliceAxis(xs[d], 1, 0, 1)
				t = b.gelu(b.layerNorm(t, "0", 1e-6))
				proj[d] = b.linear(t, "2", timmLinear(c.dims[(d+1)%2]))
			}, fmt.Sprint(d))
		}
	}, "projs")
	for i := 0; i < 2; i++ {
		o := (i + 1) % 2
		t := b.concat(1, proj[i], b.sliceAxis(xs[o], 1, 1, maxInt64))
		b.in(func() { t = crossAttentionBlock(b, t, c.heads[o]) }, "fusion", fmt.Sprint(i))
		var rev tensor
		b.in(func() {
			r := b.sliceAxis(t, 1, 0, 1)
			r = b.gelu(b.layerNorm(r, "0", 1e-6))
			rev = b.linear(r, "2", timmLinear(c.dims[i]))
		}, "revert_projs", fmt.Sprint(i))
		outs[i] = b.concat(1, rev, b.sliceAxis(xs[i], 1, 1, maxInt64))
	}
	return outs
}

// crossAttentionBlock is x[:, 0:1] + CrossAttention(norm1(x)): the class
// token queries every token.
func crossAttentionBlock(b *builder, x tensor, heads int64) tensor {
	cls := b.sliceAxis(x, 1, 0, 1)
	n := b.layerNorm(x, "norm1", 1e-6)
	b.in(func() {
		N, D := n.shape[1], n.shape[2]
		hd := D / heads
		q := b.linear(b.sliceAxis(n, 1, 0, 1), "wq", timmLinear(D))
		q = b.transpose(b.reshape(q, []int64{-1, 1, heads, hd}, 0, 1, heads, hd), 0, 2, 1, 3)
		k := b.linear(n, "wk", timmLinear(D))
		k = b.transpose(b.reshape(k, []int64{-1, N, heads, hd}, 0, N, heads, hd), 0, 2, 1, 3)
		v := b.linear(n, "wv", timmLinear(D))
		v = b.transpose(b.reshape(v, []int64{-1, N, heads, hd}, 0, N, heads, hd), 0, 2, 1, 3)
		att := b.matmul(q, b.transpose(k, 0, 1, 3, 2))
		sc := b.scalar(float32(math.Pow(float64(hd), -0.5)))
		att = b.op1("Mul", att.shape, []string{att.name, sc.name})
		n = mergeHeads(b, b.softmax(att), v, 1, D, timmLinear(D))
	}, "attn")
	return b.add(cls, n)
}

// bicubicResize is F.interpolate(x, size=(s, s), mode="bicubic",
// align_corners=False). torch exports it as Resize; it is a linear map per
// axis, written here as x·Rwᵀ then Rh·(…) with constant (s, W) and (s, H)
// matrices, which the engine runs (and differentiates) as MatMuls.
func (b *builder) bicubicResize(x tensor, s int64) tensor {
	h, w := x.hw()
	c := x.channels()
	rw := b.constFloats([]int64{w, s}, bicubicMatrix(w, s, true)...)
	y := b.op1("MatMul", []int64{-1, c, h, s}, []string{x.name, rw.name})
	rh := b.constFloats([]int64{s, h}, bicubicMatrix(h, s, false)...)
	return b.op1("MatMul", []int64{-1, c, s, s}, []string{rh.name, y.name})
}

// bicubicMatrix returns PyTorch's bicubic interpolation weights from in to
// out samples (align_corners=False, A = -0.75, border samples replicated)
// as an (out, in) matrix, or its transpose.
func bicubicMatrix(in, out int64, transpose bool) []float32 {
	const A = -0.75
	cc1 := func(x float64) float64 { return ((A+2)*x-(A+3))*x*x + 1 }
	cc2 := func(x float64) float64 { return ((A*x-5*A)*x+8*A)*x - 4*A }
	m := make([]float64, in*out)
	scale := float64(in) / float64(out)
	for o := int64(0); o < out; o++ {
		src := scale*(float64(o)+0.5) - 0.5
		i0 := int64(math.Floor(src))
		t := src - float64(i0)
		ws := [4]float64{cc2(t + 1), cc1(t), cc1(1 - t), cc2(2 - t)}
		for k := int64(0); k < 4; k++ {
			j := min(max(i0-1+k, 0), in-1)
			if transpose {
				m[j*out+o] += ws[k]
			} else {
				m[o*in+j] += ws[k]
			}
		}
	}
	f := make([]float32, len(m))
	for i, v := range m {
		f[i] = float32(v)
	}
	return f
}
