// Package zoo builds well-known vision models (ResNet, VGG, ViT, ...) as ONNX
// graphs in Go, with seeded random initialization, so that users and
// benchmarks get full-size models without Python.
//
// Build(name, Options) returns an *onnx.Model; Names lists the models,
// Lookup describes one and Count gives its parameter counts without
// drawing any weights. "dpfinetune zoo list" and "dpfinetune zoo export"
// are the command-line front end.
//
// # What the graphs look like
//
// Every model has opset 14, IR version 8, one float32 input "input" of
// shape (batch, C, H, W) and one output "logits" of shape (batch, K), where
// batch is a symbolic dimension: the graph is valid for any batch size. The
// nodes are those torch 1.13's exporter emits for the same PyTorch module in
// eval mode at opset 14 with constant folding, in the same order, so that
// after graph.InferShapes folds the shape arithmetic the operator sequence
// and every inferred shape equal those of torch.onnx.export of the
// torchvision model (the tests check this for torchvision's models where
// PyTorch is installed):
//
//   - Conv; BatchNorm folded into the preceding Conv (eval export), or kept
//     as BatchNormalization with Options.BatchNorm;
//   - Relu, Clip (ReLU6), Tanh, MaxPool, Add, Concat;
//   - adaptive average pooling as GlobalAveragePool (1×1) or AveragePool
//     (output divides input); nn.AvgPool2d as Pad (zero) + AveragePool;
//   - Flatten and Gemm(transB=1) for nn.Linear on 2-D inputs; MatMul with a
//     transposed weight initializer ("<module>.weight.T", shape (in, out))
//     plus Add of the bias for nn.Linear on tokens;
//   - LayerNorm as ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul,
//     Add (opset 14 has no LayerNormalization); GELU as Div, Erf, Add, Mul,
//     Mul; attention through Reshape, Transpose, MatMul, Softmax.
//
// Shape arithmetic is written statically where torch writes Shape/Gather
// chains: Reshape targets hold the static sizes and 0 (copy the batch
// dimension) or -1 (infer batch·heads). The class token is expanded to the
// batch with Expand(cls, Concat(Slice(Shape(x), 0, 1), [1, 1])).
//
// Two constructs torch cannot export, or exports with an operator the
// engine did not run when the zoo was written, are written as equivalent
// graphs: adaptive average pooling whose output does not divide its input
// becomes an Expand (1×1 input, as VGG's 7×7 pool on 32×32 images) or
// MatMuls with constant averaging matrices; CrossViT's bicubic resize of
// the input (F.interpolate, exported as Resize, which the runtime now
// runs too) stays two MatMuls with constant interpolation matrices, so
// that zoo models are unchanged. timm's attention follows timm 0.5, whose q, k, v =
// qkv[0], qkv[1], qkv[2] exports as Gather, not timm 0.6's qkv.unbind(0),
// which exports as Split.
//
// Initializers carry PyTorch's state_dict names ("layer1.0.conv1.weight",
// "features.0.bias", "blocks.3.attn.qkv.weight.T"). With BatchNorm folded,
// the folded convolution keeps the convolution's names and gets a bias
// "<conv>.bias"; with Options.BatchNorm every name is the state_dict name
// (plus ".T" for the transposed token Linear weights), so the weights load
// into the PyTorch module.
//
// # Initialization
//
// Weights follow the module's own init, drawn from a stream seeded by
// Options.Seed and the initializer's name: PyTorch's defaults
// (kaiming_uniform_(a=√5) for Conv and Linear weights, U(±1/√fan_in)
// biases) unless the model's constructor overrides them: torchvision's
// ResNet/VGG/MobileNetV2 kaiming_normal_(fan_out) convolutions and N(0, 0.01)
// VGG/MobileNet classifiers, DenseNet's kaiming_normal_, SqueezeNet's
// kaiming_uniform_ and N(0, 0.01) final conv, torchvision ViT's
// trunc_normal/xavier/zero-head init, timm's trunc_normal(0.02) Linear and
// embedding init, BEiT's layer-scale constants and depth-rescaled
// projections. BatchNorm starts at weight 1, bias 0, running mean 0 and
// variance 1, so a folded convolution is the convolution scaled by
// 1/√(1+ε). Equal options give byte-identical models, independent of
// GOMAXPROCS.
//
// # Models
//
// torchvision (ImageNet, 3×224×224, 1000 classes): resnet18, resnet34,
// resnet50, resnet101, resnet152, wide_resnet50_2, resnext50_32x4d, vgg11,
// vgg13, vgg16, vgg19 and their _bn variants, densenet121, mobilenet_v2,
// alexnet, squeezenet1_0, squeezenet1_1, vit_b_16.
//
// timm (the ViTs the paper fine-tunes): vit_{tiny,small,base}_patch16_224
// and deit_{tiny,small,base}_patch16_224 (the same module), BEiT
// beit_{base,large}_patch16_224, CrossViT crossvit_{tiny,small,base,9,15,18}_240
// (3×240×240).
//
// The benchmark suite of DESIGN.md §7, under its names: cnn-fmnist (the
// Tramèr–Boneh CNN, 1×28×28), resnet18-cifar and vgg11-cifar (torchvision
// resnet18 and vgg11 unchanged, 10 classes, 3×32×32: the 7×7 stem stays,
// and VGG's adaptive 7×7 pool replicates its 1×1 feature map into the
// 25088-wide classifier) and vit-tiny-cifar (torchvision VisionTransformer,
// image 32, patch 4, 4 layers, 3 heads, dim 192, MLP 768).
//
// CIFAR-10 models of kuangliu/pytorch-cifar, which the paper uses for its
// 32×32 CNN experiments, prefixed cifar_ (3×32×32, 10 classes):
//
//   - cifar_resnet18/34/50/101/152: conv1 is 3×3 stride 1 (not 7×7 stride 2)
//     and there is no max pool; shortcuts are 1×1 conv + BatchNorm; the head
//     is "linear"; its avg_pool2d(out, 4) is written as global average
//     pooling, which is the same on the 4×4 map of a 32×32 input and keeps
//     other sizes valid.
//   - cifar_vgg11/13/16/19: every conv is conv (with bias) + BatchNorm + ReLU
//     with PyTorch's default init, and the classifier is one
//     Linear(512, K) after a 1×1 adaptive average pool (kuangliu's
//     AvgPool2d(1, 1) on the 1×1 map), instead of torchvision's 7×7 pool and
//     three Linear layers.
//   - cifar_mobilenet_v2: stride 1 in the stem and the second stage, ReLU
//     instead of ReLU6, a 1×1 conv + BN shortcut when a stride-1 block
//     changes width; cifar_mobilenet is kuangliu's MobileNet v1.
//
// Options.InputShape sizes the model for another input, as the PyTorch
// constructor would (position embeddings of the ViTs, the first Linear of
// cnn-fmnist); a shape too small for a layer, or not divisible by a ViT's
// patch, is an error that names the layer.
//
// Parameter counts (Count, "dpfinetune zoo list") are PyTorch's
// sum(p.numel() for p in model.parameters()) of the module: with BatchNorm
// kept they equal torchvision's published counts (resnet18 11,689,512,
// vgg16 138,357,544, vit_b_16 86,567,656, ...), which the tests check. With
// BatchNorm folded each folded BatchNorm's 2·C parameters become the
// convolution's C bias values (resnet18: 11,684,712), as in an eval-mode
// export; BatchNorm running statistics are buffers, counted apart.
package zoo
