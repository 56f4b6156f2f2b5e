package main

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestRun_Version(t *testing.T) {
	want := currentBuild().String()
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		code, out, errs := runArgs(t, args...)
		if code != 0 || out != want || errs != "" {
			t.Errorf("%q: code %d, stdout %q, stderr %q; want 0, %q", args, code, out, errs, want)
		}
	}
	if !strings.Contains(want, runtime.Version()) {
		t.Errorf("version output %q lacks the Go version %s", want, runtime.Version())
	}
	if code, _, errs := runArgs(t, "version", "extra"); code != 2 || !strings.Contains(errs, "extra") {
		t.Errorf("version extra: code %d, stderr %q; want 2 and the argument named", code, errs)
	}
	if code, out, errs := runArgs(t, "--version", "--help"); code != 0 || !strings.Contains(out, "tollgate version") || errs != "" {
		t.Errorf("--version --help: code %d, stdout %q, stderr %q", code, out, errs)
	}
}

func TestResolveBuild(t *testing.T) {
	vcs := &debug.BuildInfo{
		Main:     debug.Module{Path: modulePath, Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abc"}, {Key: "vcs.modified", Value: "true"}},
	}
	for _, tc := range []struct {
		name            string
		version, commit string
		bi              *debug.BuildInfo
		want            buildInfo
	}{
		{"ldflags win", "0.1.0", "feed", vcs, buildInfo{Version: "0.1.0", Commit: "feed"}},
		{"build info", "", "", vcs, buildInfo{Version: "(devel)", Commit: "0123abc-dirty"}},
		{"module version", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.2.0"}}, buildInfo{Version: "v0.2.0", Commit: "unknown"}},
		{"nothing recorded", "", "", nil, buildInfo{Version: "(devel)", Commit: "unknown"}},
	} {
		got := resolveBuild(tc.version, tc.commit, tc.bi)
		tc.want.GoVersion, tc.want.Platform = runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH
		if got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
	b := buildInfo{Version: "0.1.0", Commit: "feed", GoVersion: "go1.26.8", Platform: "linux/amd64"}
	if got, want := b.String(), "tollgate 0.1.0\ncommit: feed\ngo:     go1.26.8 linux/amd64\n"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := b.forServer(); got.Version != "0.1.0" || got.Revision != "feed" {
		t.Errorf("forServer() = %+v", got)
	}
}
