package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// TestDocUpToDate fails when docs/OPERATORS.md is not what the generator
// writes from the runtime's tables.
func TestDocUpToDate(t *testing.T) {
	var b bytes.Buffer
	if err := write(&b); err != nil {
		t.Fatal(err)
	}
	for _, op := range runtime.SupportedOps() {
		if !strings.Contains(b.String(), "| "+op+" | ") {
			t.Errorf("generated list lacks %s", op)
		}
	}
	doc, err := os.ReadFile("../../docs/OPERATORS.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(doc, b.Bytes()) {
		t.Error("docs/OPERATORS.md is out of date: run go run ./internal/opsdoc > docs/OPERATORS.md")
	}
}
