package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// TestRun_NoArgsPrintsUsage: a bare `tollgate` prints the overview on
// stderr and exits 2; it does not serve.
func TestRun_NoArgsPrintsUsage(t *testing.T) {
	code, out, errs := runArgs(t)
	if code != 2 || out != "" || errs != usageText {
		t.Fatalf("code %d\nstdout %q\nstderr %q", code, out, errs)
	}
	if !strings.Contains(errs, "tollgate serve [flags]") {
		t.Errorf("the usage does not say how to serve:\n%s", errs)
	}
}

// TestRun_FlagsWithoutCommand: flags with no command before them do not
// serve; a short error says to write `tollgate serve [flags]`.
func TestRun_FlagsWithoutCommand(t *testing.T) {
	for _, args := range [][]string{
		{"--grpc-addr=:9002", "--workers", "examples/workers.yaml"},
		{"-workers", "examples/workers.yaml"},
		{"--no-such-flag"},
	} {
		code, out, errs := runArgs(t, args...)
		if code != 2 || out != "" {
			t.Errorf("%q: code %d, stdout %q", args, code, out)
		}
		if !strings.Contains(errs, "to serve, run: tollgate serve [flags]") || !strings.Contains(errs, args[0]) {
			t.Errorf("%q: stderr lacks the flag or the hint:\n%s", args, errs)
		}
		if n := strings.Count(errs, "\n"); n > 2 {
			t.Errorf("%q: %d lines of stderr, want at most 2:\n%s", args, n, errs)
		}
	}
}

// TestRun_MistypedFlagErrorIsLast: a bad flag prints its error, then a
// one-line hint, and nothing else: no list of flags above it.
func TestRun_MistypedFlagErrorIsLast(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--grpc-adr=:9002"}, "tollgate serve: flag provided but not defined: -grpc-adr (did you mean --grpc-addr?)"},
		{[]string{"serve", "--frobnicate"}, "tollgate serve: flag provided but not defined: -frobnicate"},
		{[]string{"serve", "--block-size", "big"}, `tollgate serve: invalid value "big" for flag -block-size`},
		{[]string{"serve", "stray"}, `tollgate serve: unexpected arguments ["stray"]`},
		{[]string{"check-config", "--worker", "w.yaml"}, "tollgate check-config: flag provided but not defined: -worker (did you mean --workers?)"},
		{[]string{"tokenize", "--tokeniser=estimate"}, "tollgate tokenize: flag provided but not defined: -tokeniser (did you mean --tokenizer?)"},
		{[]string{"version", "--short"}, "tollgate version: flag provided but not defined: -short"},
	} {
		code, out, errs := runArgs(t, c.args...)
		if code != 2 || out != "" {
			t.Errorf("%q: code %d, stdout %q", c.args, code, out)
		}
		lines := strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
		if len(lines) != 2 {
			t.Errorf("%q: %d lines of stderr, want the error and the hint:\n%s", c.args, len(lines), errs)
			continue
		}
		if !strings.HasPrefix(lines[0], c.want) {
			t.Errorf("%q: error line %q, want it to start %q", c.args, lines[0], c.want)
		}
		if want := "Run 'tollgate " + c.args[0] + " --help' for the flags."; lines[1] != want {
			t.Errorf("%q: hint %q, want %q", c.args, lines[1], want)
		}
	}
	// An unknown flag with no near name suggests none.
	if _, _, errs := runArgs(t, "serve", "--zzzzzz"); strings.Contains(errs, "did you mean") {
		t.Errorf("a suggestion for a flag like no other:\n%s", errs)
	}
}

// TestRun_HelpIsOverview: --help, -h and help print the overview on
// stdout and succeed; help COMMAND prints that command's help.
func TestRun_HelpIsOverview(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}, {"-help"}, {"help", "--help"}} {
		code, out, errs := runArgs(t, args...)
		if code != 0 || out != usageText || errs != "" {
			t.Errorf("%q: code %d\nstdout %q\nstderr %q", args, code, out, errs)
		}
	}
	_, serveHelp, _ := runArgs(t, "serve", "--help")
	if code, out, _ := runArgs(t, "help", "serve"); code != 0 || out != serveHelp {
		t.Errorf("help serve: code %d, output differs from serve --help:\n%s", code, out)
	}
	if code, _, errs := runArgs(t, "help", "frobnicate"); code != 2 || !strings.Contains(errs, `unknown command "frobnicate"`) {
		t.Errorf("help frobnicate: code %d, stderr %q", code, errs)
	}
}

// TestFlagGroups_EveryFlagOnce: every serving flag is in exactly one
// group of flagGroups, and every name there is a serving flag.
func TestFlagGroups_EveryFlagOnce(t *testing.T) {
	var o options
	fs := newFlagSet("serve", &o)
	group := map[string]string{}
	for _, g := range flagGroups {
		if len(g.flags) == 0 {
			t.Errorf("group %q is empty", g.title)
		}
		for _, name := range g.flags {
			if prev, ok := group[name]; ok {
				t.Errorf("--%s is in %q and in %q", name, prev, g.title)
			}
			group[name] = g.title
			if fs.Lookup(name) == nil {
				t.Errorf("group %q lists --%s, which is not a serving flag", g.title, name)
			}
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := group[f.Name]; !ok {
			t.Errorf("--%s is in no group of flagGroups (usage.go); add it to its area", f.Name)
		}
	})
}

// TestServeHelp_GroupedFlags: serve --help lists every flag once, under
// its group's title, with the flag package's text; check-config --help
// lists the same flags.
func TestServeHelp_GroupedFlags(t *testing.T) {
	var o options
	fs := newFlagSet("serve", &o)
	help := map[string]string{}
	for _, cmd := range []string{"serve", "check-config"} {
		code, out, errs := runArgs(t, cmd, "--help")
		if code != 0 || errs != "" {
			t.Fatalf("%s --help: code %d, stderr %q", cmd, code, errs)
		}
		if !strings.HasPrefix(out, "Usage: tollgate "+cmd+" [flags]\n") {
			t.Errorf("%s --help starts %q", cmd, strings.SplitN(out, "\n", 2)[0])
		}
		help[cmd] = out[strings.Index(out, "\n\n"+flagGroups[0].title+":\n"):]
		// Each title is followed by its flags, in the group's order.
		pos := 0
		for _, g := range flagGroups {
			i := strings.Index(out[pos:], "\n\n"+g.title+":\n")
			if i < 0 {
				t.Errorf("%s --help lacks the group %q after offset %d", cmd, g.title, pos)
				continue
			}
			pos += i
			for _, name := range g.flags {
				j := strings.Index(out[pos:], "\n  -"+name+" ")
				if j < 0 {
					j = strings.Index(out[pos:], "\n  -"+name+"\n")
				}
				if j < 0 {
					t.Errorf("%s --help: --%s is not under %q", cmd, name, g.title)
					continue
				}
				pos += j
			}
		}
		fs.VisitAll(func(f *flag.Flag) {
			n := strings.Count(out, "\n  -"+f.Name+" ") + strings.Count(out, "\n  -"+f.Name+"\n")
			if n != 1 {
				t.Errorf("%s --help lists --%s %d times", cmd, f.Name, n)
			}
		})
		if strings.Contains(out, "Other flags") {
			t.Errorf("%s --help has flags in no group", cmd)
		}
	}
	if help["serve"] != help["check-config"] {
		t.Error("check-config --help lists other flags than serve --help")
	}
}

// TestServeHelp_ShowsDefaults: the grouped list shows the registered
// defaults, quoted for strings, even after flags before --help set values.
func TestServeHelp_ShowsDefaults(t *testing.T) {
	_, out, _ := runArgs(t, "serve", "--grpc-addr=127.0.0.1:1", "--block-size=64", "--help")
	for _, want := range []string{
		"  -grpc-addr string\n    \text_proc gRPC listen address (default \":9002\")\n",
		"  -block-size uint\n    \tKV block size in tokens (default 16)\n",
		"  -priority-scheduler-enabled\n    \tenable SMG priority admission (slot reservations, preemption)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("serve --help lacks %q", want)
		}
	}
}

func TestPrintFlag_MatchesPrintDefaults(t *testing.T) {
	var o options
	fs := newFlagSet("serve", &o)
	var want, got strings.Builder
	fs.SetOutput(&want)
	fs.PrintDefaults()
	fs.VisitAll(func(f *flag.Flag) { printFlag(&got, f) })
	if got.String() != want.String() {
		t.Errorf("printFlag differs from PrintDefaults:\n%s\nwant\n%s", got.String(), want.String())
	}
	fs.SetOutput(io.Discard)
}

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "", 3}, {"grpc-adr", "grpc-addr", 1}, {"tokeniser", "tokenizer", 1},
		{"kitten", "sitting", 3}, {"workers", "worker", 1},
	} {
		if got := editDistance(c.a, c.b); got != c.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
