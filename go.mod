module github.com/dpfinetune/dpfinetune

go 1.26.8

require google.golang.org/protobuf v1.36.11

require github.com/ebitengine/purego v0.9.1
