package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/tollgate/tollgate/extproc"
)

// version and commit identify the build. `make build`, `make image` and the
// Dockerfile set them:
//
//	go build -ldflags "-X main.version=0.1.0 -X main.commit=$(git rev-parse HEAD)" ./cmd/tollgate
//
// Left empty, they come from the build information the go command records:
// the main module's version ("(devel)" for a build inside the repository)
// and the VCS revision.
var (
	version string
	commit  string
)

// buildInfo is what `tollgate version` prints and /metrics exports.
type buildInfo struct {
	Version   string // release version, or "(devel)"
	Commit    string // source revision, "-dirty" when built from a modified tree; or "unknown"
	GoVersion string // the Go release the binary was built with
	Platform  string // GOOS/GOARCH
}

// currentBuild returns this binary's build information.
func currentBuild() buildInfo {
	bi, _ := debug.ReadBuildInfo()
	return resolveBuild(version, commit, bi)
}

// resolveBuild prefers the values set with -ldflags -X and falls back to
// the recorded build information bi, which may be nil.
func resolveBuild(version, commit string, bi *debug.BuildInfo) buildInfo {
	b := buildInfo{Version: version, Commit: commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if b.Version == "" {
			b.Version = bi.Main.Version
		}
		if b.Commit == "" {
			var rev, modified string
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					modified = s.Value
				}
			}
			if rev != "" && modified == "true" {
				rev += "-dirty"
			}
			b.Commit = rev
		}
	}
	if b.Version == "" {
		b.Version = "(devel)"
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}

// forServer returns the build information the server exports as
// tollgate_build_info.
func (b buildInfo) forServer() extproc.BuildInfo {
	return extproc.BuildInfo{Version: b.Version, Revision: b.Commit}
}

// String is the text `tollgate version` prints.
func (b buildInfo) String() string {
	return fmt.Sprintf("tollgate %s\ncommit: %s\ngo:     %s %s\n", b.Version, b.Commit, b.GoVersion, b.Platform)
}

// isVersionFlag reports whether arg asks for the version in flag form
// (`tollgate --version`), which run treats as the version command.
func isVersionFlag(arg string) bool { return arg == "--version" || arg == "-version" }

// runVersion prints the version, commit and Go version.
func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: tollgate version (or tollgate --version)\n\nPrints the version, source commit and Go release of this binary.\n")
	}
	if err := parseFlags(fs, "version", args, stdout, stderr); err != nil {
		return err
	}
	_, err := io.WriteString(stdout, currentBuild().String())
	return err
}
