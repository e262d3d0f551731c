module github.com/dpfinetune/dpfinetune

go 1.26.8

require google.golang.org/protobuf v1.36.11

require (
	github.com/ebitengine/purego v0.9.1
	github.com/schollz/progressbar/v3 v3.19.0
	golang.org/x/term v0.28.0
)

require (
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	golang.org/x/sys v0.29.0 // indirect
)
