package zoo

import (
	"fmt"
)

// CNNs: torchvision's ImageNet models, the CIFAR-10 models of
// kuangliu/pytorch-cifar that the paper trains on 32×32 inputs, and the
// Tramèr–Boneh CNN.

var imagenet = []int64{3, 224, 224}
var cifar = []int64{3, 32, 32}

func init() {
	for _, r := range []struct {
		name   string
		blocks [4]int
		bottle bool
		groups int64
		width  int64
		what   string
	}{
		{"resnet18", [4]int{2, 2, 2, 2}, false, 1, 64, "ResNet-18"},
		{"resnet34", [4]int{3, 4, 6, 3}, false, 1, 64, "ResNet-34"},
		{"resnet50", [4]int{3, 4, 6, 3}, true, 1, 64, "ResNet-50 (v1.5: stride on the 3×3 conv)"},
		{"resnet101", [4]int{3, 4, 23, 3}, true, 1, 64, "ResNet-101 (v1.5)"},
		{"resnet152", [4]int{3, 8, 36, 3}, true, 1, 64, "ResNet-152 (v1.5)"},
		{"wide_resnet50_2", [4]int{3, 4, 6, 3}, true, 1, 128, "Wide ResNet-50-2 (bottleneck width ×2)"},
		{"resnext50_32x4d", [4]int{3, 4, 6, 3}, true, 32, 4, "ResNeXt-50 32×4d (grouped 3×3 convs)"},
	} {
		register(&spec{
			Info: Info{Name: r.name, Description: "torchvision " + r.name + ": " + r.what,
				DefaultInput: imagenet, DefaultClasses: 1000, HasBatchNorm: true},
			build: func(b *builder, x tensor, k int64) tensor {
				return resnet(b, x, k, r.blocks, r.bottle, r.groups, r.width, false)
			},
		})
	}
	register(&spec{
		Info: Info{Name: "resnet18-cifar", Description: "benchmark resnet18-cifar (DESIGN.md §7): torchvision resnet18 unchanged " +
			"(7×7 stride-2 stem and max pool), 10 classes, sized for 3×32×32; the benchmark replaces BatchNorm by GroupNorm with a rewrite",
			DefaultInput: cifar, DefaultClasses: 10, HasBatchNorm: true},
		build: func(b *builder, x tensor, k int64) tensor {
			return resnet(b, x, k, [4]int{2, 2, 2, 2}, false, 1, 64, false)
		},
	})
	for _, r := range []struct {
		name   string
		blocks [4]int
		bottle bool
	}{
		{"cifar_resnet18", [4]int{2, 2, 2, 2}, false},
		{"cifar_resnet34", [4]int{3, 4, 6, 3}, false},
		{"cifar_resnet50", [4]int{3, 4, 6, 3}, true},
		{"cifar_resnet101", [4]int{3, 4, 23, 3}, true},
		{"cifar_resnet152", [4]int{3, 8, 36, 3}, true},
	} {
		register(&spec{
			Info: Info{Name: r.name, Description: "CIFAR-10 ResNet of kuangliu/pytorch-cifar (the paper's CIFAR CNNs): " +
				"3×3 stride-1 stem without max pool, 1×1-conv+BN shortcuts; its final avg_pool2d(4) is a global average pool (equal at 32×32)",
				DefaultInput: cifar, DefaultClasses: 10, HasBatchNorm: true},
			build: func(b *builder, x tensor, k int64) tensor {
				return resnet(b, x, k, r.blocks, r.bottle, 1, 64, true)
			},
		})
	}

	for _, v := range []struct {
		name string
		cfg  []int64
	}{
		{"vgg11", vggA}, {"vgg13", vggB}, {"vgg16", vggD}, {"vgg19", vggE},
	} {
		for _, bn := range []bool{false, true} {
			name, what := v.name, "without BatchNorm"
			if bn {
				name, what = v.name+"_bn", "with BatchNorm"
			}
			register(&spec{
				Info: Info{Name: name, Description: "torchvision " + name + ": " + what + ", adaptive 7×7 average pool, 3-layer classifier",
					DefaultInput: imagenet, DefaultClasses: 1000, HasBatchNorm: bn},
				build: func(b *builder, x tensor, k int64) tensor { return vgg(b, x, k, v.cfg, bn) },
			})
		}
		register(&spec{
			Info: Info{Name: "cifar_" + v.name, Description: "CIFAR-10 VGG of kuangliu/pytorch-cifar: conv+BN+ReLU features, " +
				"then a 1×1 adaptive average pool (its AvgPool2d(1) on the 1×1 map at 32×32) and one Linear(512, classes)",
				DefaultInput: cifar, DefaultClasses: 10, HasBatchNorm: true},
			build: func(b *builder, x tensor, k int64) tensor { return cifarVGG(b, x, k, v.cfg) },
		})
	}
	register(&spec{
		Info: Info{Name: "vgg11-cifar", Description: "benchmark vgg11-cifar (DESIGN.md §7): torchvision vgg11 unchanged " +
			"(the 1×1 feature map at 32×32 is pooled to 7×7, i.e. replicated, before the 25088-wide classifier), 10 classes",
			DefaultInput: cifar, DefaultClasses: 10},
		build: func(b *builder, x tensor, k int64) tensor { return vgg(b, x, k, vggA, false) },
	})

	register(&spec{
		Info: Info{Name: "densenet121", Description: "torchvision densenet121: growth 32, blocks (6, 12, 24, 16), " +
			"pre-activation BatchNorms stay BatchNormalization nodes in eval export",
			DefaultInput: imagenet, DefaultClasses: 1000, HasBatchNorm: true},
		build: func(b *builder, x tensor, k int64) tensor { return densenet(b, x, k, 32, []int{6, 12, 24, 16}, 64) },
	})
	register(&spec{
		Info: Info{Name: "mobilenet_v2", Description: "torchvision mobilenet_v2 (width 1.0): inverted residuals, ReLU6 as Clip",
			DefaultInput: imagenet, DefaultClasses: 1000, HasBatchNorm: true},
		build: mobilenetV2,
	})
	register(&spec{
		Info: Info{Name: "cifar_mobilenet_v2", Description: "CIFAR-10 MobileNetV2 of kuangliu/pytorch-cifar: stride-1 stem and " +
			"second stage, ReLU (not ReLU6), 1×1-conv shortcut where channels change at stride 1; final avg_pool2d(4) as a global average pool",
			DefaultInput: cifar, DefaultClasses: 10, HasBatchNorm: true},
		build: cifarMobileNetV2,
	})
	register(&spec{
		Info: Info{Name: "cifar_mobilenet", Description: "CIFAR-10 MobileNet (v1) of kuangliu/pytorch-cifar: depthwise-separable " +
			"convs; final avg_pool2d(2) as a global average pool (equal at 32×32)",
			DefaultInput: cifar, DefaultClasses: 10, HasBatchNorm: true},
		build: cifarMobileNet,
	})
	register(&spec{
		Info: Info{Name: "alexnet", Description: "torchvision alexnet: 5 convs, adaptive 6×6 average pool, 3-layer classifier",
			DefaultInput: imagenet, DefaultClasses: 1000},
		build: alexnet,
	})
	register(&spec{
		Info: Info{Name: "squeezenet1_0", Description: "torchvision squeezenet1_0: Fire modules, 1×1 conv classifier",
			DefaultInput: imagenet, DefaultClasses: 1000},
		build: func(b *builder, x tensor, k int64) tensor { return squeezenet(b, x, k, false) },
	})
	register(&spec{
		Info: Info{Name: "squeezenet1_1", Description: "torchvision squeezenet1_1: Fire modules, 3×3 stem, earlier pooling",
			DefaultInput: imagenet, DefaultClasses: 1000},
		build: func(b *builder, x tensor, k int64) tensor { return squeezenet(b, x, k, true) },
	})
	register(&spec{
		Info: Info{Name: "cnn-fmnist", Description: "benchmark cnn-fmnist (DESIGN.md §7): the Tramèr–Boneh CNN, Conv(16, k8, s2, p2) " +
			"Tanh MaxPool(2, s1) Conv(32, k4, s2) Tanh MaxPool(2, s1) Linear(512, 32) Tanh Linear(32, classes); the first Linear's width follows the input size",
			DefaultInput: []int64{1, 28, 28}, DefaultClasses: 10},
		build: cnnFMNIST,
	})
}

// --- ResNet ---

// resnet is torchvision's ResNet (cifar false) or kuangliu's CIFAR ResNet
// (cifar true: 3×3 stride-1 stem, no max pool; its 1×1 shortcut convs have
// no bias either way).
func resnet(b *builder, x tensor, classes int64, blocks [4]int, bottleneck bool, groups, widthPerGroup int64, cifar bool) tensor {
	// torchvision: kaiming_normal_(fan_out, relu) for every conv; kuangliu
	// keeps PyTorch's defaults.
	cinit := func(c convSpec) convSpec {
		if !cifar {
			d := kaimingNormalFanOut(c.out * c.k * c.k)
			c.weight = &d
		}
		return c
	}
	if cifar {
		x = b.convBN(x, "conv1", "bn1", cinit(convSpec{out: 64, k: 3, pad: 1}))
		x = b.relu(x)
	} else {
		x = b.convBN(x, "conv1", "bn1", cinit(convSpec{out: 64, k: 7, stride: 2, pad: 3}))
		x = b.relu(x)
		x = b.in1("maxpool", func() tensor { return b.maxPool(x, 3, 2, 1, false) })
	}
	expansion := int64(1)
	if bottleneck {
		expansion = 4
	}
	inplanes := int64(64)
	shortcut := "downsample"
	if cifar {
		shortcut = "shortcut"
	}
	for li, n := range blocks {
		planes := int64(64) << li
		stride := int64(1)
		if li > 0 {
			stride = 2
		}
		for bi := 0; bi < n; bi++ {
			s := int64(1)
			if bi == 0 {
				s = stride
			}
			b.in(func() {
				in := x
				var out tensor
				if bottleneck {
					width := planes * widthPerGroup / 64 * groups
					out = b.relu(b.convBN(in, "conv1", "bn1", cinit(convSpec{out: width, k: 1})))
					out = b.relu(b.convBN(out, "conv2", "bn2", cinit(convSpec{out: width, k: 3, stride: s, pad: 1, groups: groups})))
					out = b.convBN(out, "conv3", "bn3", cinit(convSpec{out: planes * expansion, k: 1}))
				} else {
					out = b.relu(b.convBN(in, "conv1", "bn1", cinit(convSpec{out: planes, k: 3, stride: s, pad: 1})))
					out = b.convBN(out, "conv2", "bn2", cinit(convSpec{out: planes, k: 3, pad: 1}))
				}
				identity := in
				if s != 1 || inplanes != planes*expansion {
					b.in(func() {
						identity = b.convBN(in, "0", "1", cinit(convSpec{out: planes * expansion, k: 1, stride: s}))
					}, shortcut)
				}
				x = b.relu(b.add(out, identity))
			}, fmt.Sprintf("layer%d", li+1), fmt.Sprint(bi))
			inplanes = planes * expansion
		}
	}
	x = b.adaptiveAvgPool(x, 1, 1)
	x = b.flatten(x)
	fc := "fc"
	if cifar {
		fc = "linear"
	}
	return b.gemm(x, fc, linearSpec{out: classes})
}

// --- VGG ---

// VGG configurations; 0 is a 2×2 max pool.
var (
	vggA = []int64{64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0}
	vggB = []int64{64, 64, 0, 128, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0}
	vggD = []int64{64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0}
	vggE = []int64{64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0, 512, 512, 512, 512, 0, 512, 512, 512, 512, 0}
)

// vggFeatures emits VGG's feature extractor under "features" with
// torchvision's init when tvInit (kaiming_normal_ fan_out, zero bias) and
// PyTorch's defaults otherwise.
func vggFeatures(b *builder, x tensor, cfg []int64, bn, tvInit bool) tensor {
	b.in(func() {
		i := 0
		for _, v := range cfg {
			if v == 0 {
				x = b.in1(fmt.Sprint(i), func() tensor { return b.maxPool(x, 2, 2, 0, false) })
				i++
				continue
			}
			c := convSpec{out: v, k: 3, pad: 1, bias: true}
			if tvInit {
				w, z := kaimingNormalFanOut(v*9), zeros()
				c.weight, c.biasInit = &w, &z
			}
			if bn {
				x = b.convBN(x, fmt.Sprint(i), fmt.Sprint(i+1), c)
				i += 3
			} else {
				x = b.conv(x, fmt.Sprint(i), c)
				i += 2
			}
			x = b.relu(x)
		}
	}, "features")
	return x
}

// vgg is torchvision's VGG: features, AdaptiveAvgPool2d((7, 7)), Flatten,
// Linear(512·49, 4096) ReLU Dropout Linear(4096, 4096) ReLU Dropout
// Linear(4096, classes); linear weights N(0, 0.01), biases zero.
func vgg(b *builder, x tensor, classes int64, cfg []int64, bn bool) tensor {
	x = vggFeatures(b, x, cfg, bn, true)
	x = b.in1("avgpool", func() tensor { return b.adaptiveAvgPool(x, 7, 7) })
	x = b.flatten(x)
	w, z := normal(0.01), zeros()
	b.in(func() {
		x = b.relu(b.gemm(x, "0", linearSpec{out: 4096, weight: &w, biasInit: &z}))
		x = b.relu(b.gemm(x, "3", linearSpec{out: 4096, weight: &w, biasInit: &z}))
		x = b.gemm(x, "6", linearSpec{out: classes, weight: &w, biasInit: &z})
	}, "classifier")
	return x
}

// cifarVGG is kuangliu's CIFAR VGG: conv(bias)+BN+ReLU features with
// PyTorch's default init, a 1×1 average pool and Linear(512, classes).
func cifarVGG(b *builder, x tensor, classes int64, cfg []int64) tensor {
	x = vggFeatures(b, x, cfg, true, false)
	x = b.adaptiveAvgPool(x, 1, 1)
	x = b.flatten(x)
	return b.gemm(x, "classifier", linearSpec{out: classes})
}

// in1 runs f in scope name and returns its result.
func (b *builder) in1(name string, f func() tensor) tensor {
	var t tensor
	b.in(func() { t = f() }, name)
	return t
}

// --- DenseNet ---

// densenet is torchvision's DenseNet (bn_size 4): conv init
// kaiming_normal_ (fan_in), Linear bias zero.
func densenet(b *builder, x tensor, classes, growth int64, blocks []int, initFeatures int64) tensor {
	kn := func(cin, k int64) *dist {
		d := kaimingNormalFanIn(cin * k * k)
		return &d
	}
	b.in(func() {
		x = b.convBN(x, "conv0", "norm0", convSpec{out: initFeatures, k: 7, stride: 2, pad: 3, weight: kn(x.channels(), 7)})
		x = b.relu(x)
		x = b.in1("pool0", func() tensor { return b.maxPool(x, 3, 2, 1, false) })
		for bi, n := range blocks {
			b.in(func() {
				feats := []tensor{x}
				for li := 0; li < n; li++ {
					b.in(func() {
						cat := b.concat(1, feats...)
						y := b.relu(b.batchNorm(cat, "norm1"))
						y = b.relu(b.convBN(y, "conv1", "norm2", convSpec{out: 4 * growth, k: 1, weight: kn(cat.channels(), 1)}))
						y = b.conv(y, "conv2", convSpec{out: growth, k: 3, pad: 1, weight: kn(4*growth, 3)})
						feats = append(feats, y)
					}, fmt.Sprintf("denselayer%d", li+1))
				}
				x = b.concat(1, feats...)
			}, fmt.Sprintf("denseblock%d", bi+1))
			if bi != len(blocks)-1 {
				b.in(func() {
					x = b.relu(b.batchNorm(x, "norm"))
					half := x.channels() / 2
					x = b.conv(x, "conv", convSpec{out: half, k: 1, weight: kn(x.channels(), 1)})
					x = b.avgPool(x, 2, 2)
				}, fmt.Sprintf("transition%d", bi+1))
			}
		}
		x = b.batchNorm(x, "norm5")
	}, "features")
	x = b.relu(x)
	x = b.adaptiveAvgPool(x, 1, 1)
	x = b.flatten(x)
	z := zeros()
	return b.gemm(x, "classifier", linearSpec{out: classes, biasInit: &z})
}

// --- MobileNet ---

// makeDivisible is torchvision's _make_divisible(v, 8).
func makeDivisible(v float64, divisor int64) int64 {
	n := max(divisor, (int64(v+float64(divisor)/2)/divisor)*divisor)
	if float64(n) < 0.9*v {
		n += divisor
	}
	return n
}

// mobilenetV2 is torchvision's MobileNetV2 (width 1.0): convs
// kaiming_normal_ (fan_out), Linear N(0, 0.01) with zero bias.
func mobilenetV2(b *builder, x tensor, classes int64) tensor {
	kn := func(cout, k int64) *dist {
		d := kaimingNormalFanOut(cout * k * k)
		return &d
	}
	cbr := func(x tensor, cout, k, stride, groups int64) tensor {
		// Conv2dNormActivation: Conv (no bias) "0", BatchNorm "1", ReLU6.
		return b.relu6(b.convBN(x, "0", "1", convSpec{out: cout, k: k, stride: stride, pad: (k - 1) / 2, groups: groups, weight: kn(cout, k)}))
	}
	cfg := [][4]int64{{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2}, {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}}
	input := makeDivisible(32, 8)
	last := makeDivisible(1280, 8)
	b.in(func() {
		idx := 0
		b.in(func() { x = cbr(x, input, 3, 2, 1) }, fmt.Sprint(idx))
		idx++
		for _, c := range cfg {
			t, out, n, s := c[0], makeDivisible(float64(c[1]), 8), c[2], c[3]
			for i := int64(0); i < n; i++ {
				stride := int64(1)
				if i == 0 {
					stride = s
				}
				b.in(func() {
					in := x
					hidden := in.channels() * t
					y := in
					b.in(func() {
						j := 0
						if t != 1 {
							b.in(func() { y = cbr(y, hidden, 1, 1, 1) }, fmt.Sprint(j))
							j++
						}
						b.in(func() { y = cbr(y, hidden, 3, stride, hidden) }, fmt.Sprint(j))
						j++
						y = b.convBN(y, fmt.Sprint(j), fmt.Sprint(j+1), convSpec{out: out, k: 1, weight: kn(out, 1)})
					}, "conv")
					if stride == 1 && in.channels() == out {
						y = b.add(in, y)
					}
					x = y
				}, fmt.Sprint(idx))
				idx++
			}
		}
		b.in(func() { x = cbr(x, last, 1, 1, 1) }, fmt.Sprint(idx))
	}, "features")
	x = b.adaptiveAvgPool(x, 1, 1)
	x = b.flatten(x)
	w, z := normal(0.01), zeros()
	return b.in1("classifier", func() tensor { return b.gemm(x, "1", linearSpec{out: classes, weight: &w, biasInit: &z}) })
}

// cifarMobileNetV2 is kuangliu's CIFAR MobileNetV2 (PyTorch default init).
func cifarMobileNetV2(b *builder, x tensor, classes int64) tensor {
	cfg := [][4]int64{{1, 16, 1, 1}, {6, 24, 2, 1}, {6, 32, 3, 2}, {6, 64, 4, 2}, {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}}
	x = b.relu(b.convBN(x, "conv1", "bn1", convSpec{out: 32, k: 3, pad: 1}))
	in := int64(32)
	idx := 0
	b.in(func() {
		for _, c := range cfg {
			t, out, n, s := c[0], c[1], c[2], c[3]
			for i := int64(0); i < n; i++ {
				stride := int64(1)
				if i == 0 {
					stride = s
				}
				b.in(func() {
					planes := t * in
					y := b.relu(b.convBN(x, "conv1", "bn1", convSpec{out: planes, k: 1}))
					y = b.relu(b.convBN(y, "conv2", "bn2", convSpec{out: planes, k: 3, stride: stride, pad: 1, groups: planes}))
					y = b.convBN(y, "conv3", "bn3", convSpec{out: out, k: 1})
					if stride == 1 {
						sc := x
						if in != out {
							b.in(func() { sc = b.convBN(x, "0", "1", convSpec{out: out, k: 1}) }, "shortcut")
						}
						y = b.add(y, sc)
					}
					x = y
				}, fmt.Sprint(idx))
				idx++
				in = out
			}
		}
	}, "layers")
	x = b.relu(b.convBN(x, "conv2", "bn2", convSpec{out: 1280, k: 1}))
	x = b.adaptiveAvgPool(x, 1, 1)
	x = b.flatten(x)
	return b.gemm(x, "linear", linearSpec{out: classes})
}

// cifarMobileNet is kuangliu's CIFAR MobileNet v1 (PyTorch default init).
func cifarMobileNet(b *builder, x tensor, classes int64) tensor {
	// (out channels, stride)
	cfg := [][2]int64{{64, 1}, {128, 2}, {128, 1}, {256, 2}, {256, 1}, {512, 2}, {512, 1}, {512, 1}, {512, 1}, {512, 1}, {512, 1}, {1024, 2}, {1024, 1}}
	x = b.relu(b.convBN(x, "conv1", "bn1", convSpec{out: 32, k: 3, pad: 1}))
	b.in(func() {
		for i, c := range cfg {
			b.in(func() {
				in := x.channels()
				x = b.relu(b.convBN(x, "conv1", "bn1", convSpec{out: in, k: 3, stride: c[1], pad: 1, groups: in}))
				x = b.relu(b.convBN(x, "conv2", "bn2", convSpec{out: c[0], k: 1}))
			}, fmt.Sprint(i))
		}
	}, "layers")
	x = b.adaptiveAvgPool(x, 1, 1)
	x = b.flatten(x)
	return b.gemm(x, "linear", linearSpec{out: classes})
}

// --- AlexNet, SqueezeNet ---

// alexnet is torchvision's AlexNet (PyTorch default init).
func alexnet(b *builder, x tensor, classes int64) tensor {
	b.in(func() {
		pool := func(name string) { x = b.in1(name, func() tensor { return b.maxPool(x, 3, 2, 0, false) }) }
		x = b.relu(b.conv(x, "0", convSpec{out: 64, k: 11, stride: 4, pad: 2, bias: true}))
		pool("2")
		x = b.relu(b.conv(x, "3", convSpec{out: 192, k: 5, pad: 2, bias: true}))
		pool("5")
		x = b.relu(b.conv(x, "6", convSpec{out: 384, k: 3, pad: 1, bias: true}))
		x = b.relu(b.conv(x, "8", convSpec{out: 256, k: 3, pad: 1, bias: true}))
		x = b.relu(b.conv(x, "10", convSpec{out: 256, k: 3, pad: 1, bias: true}))
		pool("12")
	}, "features")
	x = b.in1("avgpool", func() tensor { return b.adaptiveAvgPool(x, 6, 6) })
	x = b.flatten(x)
	b.in(func() {
		x = b.relu(b.gemm(x, "1", linearSpec{out: 4096}))
		x = b.relu(b.gemm(x, "4", linearSpec{out: 4096}))
		x = b.gemm(x, "6", linearSpec{out: classes})
	}, "classifier")
	return x
}

// squeezenet is torchvision's SqueezeNet 1.0 or 1.1: convs kaiming_uniform_
// (a=0), the final conv N(0, 0.01), biases zero.
func squeezenet(b *builder, x tensor, classes int64, v11 bool) tensor {
	conv := func(x tensor, name string, out, k, stride, pad int64) tensor {
		w, z := kaimingUniformReLU(x.channels()*k*k), zeros()
		return b.relu(b.conv(x, name, convSpec{out: out, k: k, stride: stride, pad: pad, bias: true, weight: &w, biasInit: &z}))
	}
	fire := func(name string, squeeze, e1, e3 int64) {
		b.in(func() {
			s := conv(x, "squeeze", squeeze, 1, 1, 0)
			a := conv(s, "expand1x1", e1, 1, 1, 0)
			c := conv(s, "expand3x3", e3, 3, 1, 1)
			x = b.concat(1, a, c)
		}, name)
	}
	pool := func(name string) { x = b.in1(name, func() tensor { return b.maxPool(x, 3, 2, 0, true) }) }
	b.in(func() {
		if v11 {
			x = conv(x, "0", 64, 3, 2, 0)
			pool("2")
			fire("3", 16, 64, 64)
			fire("4", 16, 64, 64)
			pool("5")
			fire("6", 32, 128, 128)
			fire("7", 32, 128, 128)
			pool("8")
			fire("9", 48, 192, 192)
			fire("10", 48, 192, 192)
			fire("11", 64, 256, 256)
			fire("12", 64, 256, 256)
		} else {
			x = conv(x, "0", 96, 7, 2, 0)
			pool("2")
			fire("3", 16, 64, 64)
			fire("4", 16, 64, 64)
			fire("5", 32, 128, 128)
			pool("6")
			fire("7", 32, 128, 128)
			fire("8", 48, 192, 192)
			fire("9", 48, 192, 192)
			fire("10", 64, 256, 256)
			pool("11")
			fire("12", 64, 256, 256)
		}
	}, "features")
	b.in(func() {
		w, z := normal(0.01), zeros()
		x = b.relu(b.conv(x, "1", convSpec{out: classes, k: 1, bias: true, weight: &w, biasInit: &z}))
		x = b.adaptiveAvgPool(x, 1, 1)
	}, "classifier")
	return b.flatten(x)
}

// cnnFMNIST is the Tramèr–Boneh CNN of the benchmark suite (PyTorch
// default init), named as the fixture testdata/models/cnn.onnx.
func cnnFMNIST(b *builder, x tensor, classes int64) tensor {
	b.in(func() {
		x = b.tanh(b.conv(x, "0", convSpec{out: 16, k: 8, stride: 2, pad: 2, bias: true}))
		x = b.maxPool(x, 2, 1, 0, false)
		x = b.tanh(b.conv(x, "3", convSpec{out: 32, k: 4, stride: 2, bias: true}))
		x = b.maxPool(x, 2, 1, 0, false)
	}, "features")
	b.in(func() {
		x = b.flatten(x)
		x = b.tanh(b.gemm(x, "1", linearSpec{out: 32}))
		x = b.gemm(x, "3", linearSpec{out: classes})
	}, "classifier")
	return x
}
