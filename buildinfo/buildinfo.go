// Package buildinfo says which fleetmgr this is: module version, VCS
// revision and time, whether the tree was modified, and the Go version,
// from the build information the Go toolchain embeds in every binary
// (runtime/debug.ReadBuildInfo).
//
// `go build` and `go install` in a git checkout record the revision
// (vcs.revision, vcs.time, vcs.modified) unless -buildvcs=false; `go
// install module@version` records the module version instead; `go run` and
// `go test` binaries record neither. Whatever is missing reads "unknown",
// never an error.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Unknown stands for a fact the binary does not carry.
const Unknown = "unknown"

// Info is what a fleetmgr binary knows of its own build.
type Info struct {
	// Module is the main module's path, e.g. github.com/fleetmgr/fleetmgr.
	Module string `json:"module"`
	// Version is the main module's version: a release tag (v1.2.0), a
	// pseudo-version the toolchain derived from git (v0.0.0-2026…-abcdef
	// or …+dirty), or Unknown for a development build ("(devel)").
	Version string `json:"version"`
	// Revision is the VCS commit hash, or Unknown.
	Revision string `json:"revision"`
	// Time is the commit time (RFC 3339, UTC), or Unknown.
	Time string `json:"time"`
	// Modified reports whether the working tree had uncommitted changes
	// when the binary was built (false when unknown).
	Modified bool `json:"modified"`
	// GoVersion is the toolchain that built the binary, e.g. go1.26.8.
	GoVersion string `json:"go_version"`
}

// Read returns the running binary's Info. override, when not "" or "dev",
// is a version given at link time (-ldflags -X) and takes the place of the
// module version.
func Read(override string) Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return fromBuildInfo(bi, override)
}

// fromBuildInfo is Read on given build information (nil: none).
func fromBuildInfo(bi *debug.BuildInfo, override string) Info {
	in := Info{Module: Unknown, Version: Unknown, Revision: Unknown, Time: Unknown, GoVersion: runtime.Version()}
	if bi != nil {
		if bi.Main.Path != "" {
			in.Module = bi.Main.Path
		}
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			in.Version = v
		}
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if s.Value != "" {
					in.Revision = s.Value
				}
			case "vcs.time":
				if s.Value != "" {
					in.Time = s.Value
				}
			case "vcs.modified":
				in.Modified = s.Value == "true"
			}
		}
	}
	if override != "" && override != "dev" {
		in.Version = override
	}
	return in
}

// Short is the version for protocol handshakes and serve.json: Version,
// else "dev+" and the first 12 characters of Revision (with "-dirty" when
// Modified), else "dev".
func (in Info) Short() string {
	if in.Version != Unknown {
		return in.Version
	}
	if in.Revision != Unknown {
		r := in.Revision
		if len(r) > 12 {
			r = r[:12]
		}
		if in.Modified {
			r += "-dirty"
		}
		return "dev+" + r
	}
	return "dev"
}

// String is the line `fleetmgr --version` prints after the program name:
// "v1.2.0 (revision 0123abcd…, 2026-07-01T10:00:00Z, modified) go1.26.8".
func (in Info) String() string {
	var b strings.Builder
	b.WriteString(in.Short())
	var parts []string
	if in.Revision != Unknown {
		parts = append(parts, "revision "+in.Revision)
	} else {
		parts = append(parts, "revision unknown")
	}
	if in.Time != Unknown {
		parts = append(parts, in.Time)
	}
	if in.Modified {
		parts = append(parts, "modified")
	}
	fmt.Fprintf(&b, " (%s) %s", strings.Join(parts, ", "), in.GoVersion)
	return b.String()
}
