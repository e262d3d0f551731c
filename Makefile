# dpfinetune: the two commands of the README are "make demo" and "make test".

GO ?= go
FUZZTIME ?= 100000x

.PHONY: all build demo test lint fuzz fixtures generate bench

all: build

build:
	$(GO) build -o bin/dpfinetune ./cmd/dpfinetune

# The main job on the shipped fixture model.
demo: build
	@./scripts/setup.sh
	./scripts/demo.sh

# Everything CI runs.
test:
	@./scripts/setup.sh test
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod/go.sum are not tidy: run go mod tidy"; $(GO) mod tidy -diff; exit 1; }
	$(GO) vet ./...
	@# The binary needs no cgo: the CUDA backend and OpenBLAS load at run time.
	CGO_ENABLED=0 $(GO) build ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@# A package's tests on a 2-core machine shared by the others: the
	@# DP engine's take some 7½ of the default 10 minutes there.
	$(GO) test -count=1 -timeout 25m ./...
	$(GO) test -count=1 -run '^$$' -fuzz FuzzLoad -fuzztime $(FUZZTIME) ./onnx
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; n=$${rest#*:}; \
		echo "fuzz $$name ($$n inputs)"; \
		$(GO) test -count=1 -run '^$$' -fuzz "^$$name\$$" -fuzztime $$n -parallel 2 ./$$pkg; \
	done

# The fuzz targets beyond the loader (docs/ROBUSTNESS.md), as
# package:target:inputs for make test; make fuzz runs each for FUZZ_LONG.
FUZZ_TARGETS = dpengine:FuzzPipeline:1500x dpengine:FuzzCheckpoint:20000x \
	internal/npy:FuzzRead:20000x dpengine/data:FuzzIDX:5000x \
	dpengine/data:FuzzCIFAR:500x dpengine/data:FuzzImage:5000x \
	dpengine/data:FuzzArrays:2000x graph:FuzzControlFlow:20000x \
	internal/pnm:FuzzDecode:20000x dpengine/data:FuzzCSV:20000x \
	dpengine/data:FuzzKeptPixels:2000x internal/dicom:FuzzDecode:20000x \
	internal/dicom:FuzzJPEGLossless:20000x internal/dicom:FuzzJPEGLS:20000x \
	internal/dicom:FuzzJPEG2000:20000x internal/dicom:FuzzPalette:20000x \
	internal/nifti:FuzzDecode:20000x dpengine/data:FuzzNIfTI:2000x
FUZZ_LONG ?= 30s

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzLoad -fuzztime $(FUZZ_LONG) ./onnx
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZ_LONG) ./$$pkg; \
	done

# Regenerate the ONNX bindings (needs protoc) and the fixtures (needs
# /usr/bin/python3 with torch, torchvision and onnx).
generate:
	$(GO) generate ./onnx

fixtures:
	/usr/bin/python3 testdata/gen/make_fixtures.py --out testdata

bench:
	$(GO) test -run '^$$' -bench . ./...
