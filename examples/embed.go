// Package examples holds the example configuration files of this directory
// (the *.yaml files at its top; not kubernetes/), so that a program can
// carry them instead of looking for them on disk. The demonstration uses it.
package examples

import (
	"embed"
	"io/fs"
)

//go:embed *.yaml
var files embed.FS

// FS returns the example configuration files, named as in this directory
// (for example "premium_4x.yaml").
func FS() fs.FS { return files }
