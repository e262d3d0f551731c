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
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) test -count=1 ./...
	$(GO) test -count=1 -run '^$$' -fuzz FuzzLoad -fuzztime $(FUZZTIME) ./onnx

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzLoad -fuzztime 30s ./onnx

# Regenerate the ONNX bindings (needs protoc) and the fixtures (needs
# /usr/bin/python3 with torch, torchvision and onnx).
generate:
	$(GO) generate ./onnx

fixtures:
	/usr/bin/python3 testdata/gen/make_fixtures.py --out testdata

bench:
	$(GO) test -run '^$$' -bench . ./...
