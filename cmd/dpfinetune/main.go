// Command dpfinetune fine-tunes vision models exported from PyTorch as ONNX
// with differential privacy.
//
// Usage:
//
//	dpfinetune <command> [flags]
//
// Run "dpfinetune help" for the list of commands and "dpfinetune <command>
// -h" for the flags of one.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sort"
	"strings"
)

// command is one subcommand of the CLI. Each lives in its own file and
// registers itself in init.
type command struct {
	name    string
	summary string
	// run parses args (the arguments after the command name) and does the
	// work, writing results to stdout. A returned error is printed on one
	// line with the command name and turns into exit status exitError
	// (exitUsage for a usageError); flag.ErrHelp exits 0.
	run func(args []string, stdout io.Writer) error
}

var commands = map[string]*command{}

func register(c *command) { commands[c.name] = c }

// Exit statuses, documented in README.md ("Exit status").
const (
	exitOK    = 0
	exitError = 1  // the input, model, data, a file or a limit: one line says what and where
	exitUsage = 2  // the command line itself
	exitBug   = 70 // a panic: a bug in dpfinetune (EX_SOFTWARE of sysexits.h)
)

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

// runMain is main without the process exit, so that tests can call it. A
// panic in the command's goroutine is a bug: it is reported as one, with
// its stack, and exit status exitBug.
func runMain(args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "dpfinetune: internal error (a bug in dpfinetune, please report it with the command line): %v\n%s", r, debug.Stack())
			code = exitBug
		}
	}()
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "dpfinetune: unknown command %q\n\n", args[0])
		usage(stderr)
		return exitUsage
	}
	if err := c.run(args[1:], stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(stderr, "dpfinetune %s: %s\n", c.name, oneLine(err.Error()))
		var ue usageError
		if errors.As(err, &ue) {
			return exitUsage
		}
		return exitError
	}
	return exitOK
}

// oneLine keeps an error message on one line, whatever a file name or a
// wrapped error holds.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

// usageError marks an error in the command line itself (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// flagGiven reports whether the command line set flag name of fs.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// newFlagSet returns a flag set whose parse errors are returned, not fatal,
// and whose usage line names the command.
func newFlagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("dpfinetune "+name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: dpfinetune %s %s\n\nflags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args and reports a usage error for stray positional
// arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "dpfinetune: differentially private fine-tuning of ONNX vision models")
	fmt.Fprintln(w, "\nusage: dpfinetune <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun \"dpfinetune <command> -h\" for the flags of a command.")
}
