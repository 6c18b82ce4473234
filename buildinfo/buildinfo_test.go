package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	vcs := func(kv ...string) []debug.BuildSetting {
		var out []debug.BuildSetting
		for i := 0; i+1 < len(kv); i += 2 {
			out = append(out, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	rev := "0123456789abcdef0123456789abcdef01234567"
	for _, tc := range []struct {
		name     string
		bi       *debug.BuildInfo
		override string
		short    string
		str      string
	}{
		{"none", nil, "", "dev", "dev (revision unknown) " + runtime.Version()},
		{"go test / go run", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/fleetmgr/fleetmgr", Version: "(devel)"}},
			"dev", "dev", "dev (revision unknown) go1.26.8"},
		{"go build in a checkout", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "m", Version: "(devel)"},
			Settings: vcs("vcs", "git", "vcs.revision", rev, "vcs.time", "2026-07-01T10:00:00Z", "vcs.modified", "true")},
			"", "dev+0123456789ab-dirty", "dev+0123456789ab-dirty (revision " + rev + ", 2026-07-01T10:00:00Z, modified) go1.26.8"},
		{"stamped pseudo-version", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "m", Version: "v0.0.0-20260701100000-0123456789ab"},
			Settings: vcs("vcs.revision", rev, "vcs.time", "2026-07-01T10:00:00Z", "vcs.modified", "false")},
			"", "v0.0.0-20260701100000-0123456789ab", "v0.0.0-20260701100000-0123456789ab (revision " + rev + ", 2026-07-01T10:00:00Z) go1.26.8"},
		{"go install module@version", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "m", Version: "v1.2.0"}},
			"", "v1.2.0", "v1.2.0 (revision unknown) go1.26.8"},
		{"ldflags override", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "m", Version: "v1.2.0"}},
			"v1.3.0-rc1", "v1.3.0-rc1", "v1.3.0-rc1 (revision unknown) go1.26.8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := fromBuildInfo(tc.bi, tc.override)
			if in.Short() != tc.short || in.String() != tc.str {
				t.Fatalf("Short %q String %q; want %q %q", in.Short(), in.String(), tc.short, tc.str)
			}
		})
	}
}

// TestReadInTest: a test binary carries no VCS facts and no module
// version; Read says unknown rather than failing, and names the toolchain.
func TestReadInTest(t *testing.T) {
	in := Read("")
	if in.Revision != Unknown || in.Time != Unknown || in.Version != Unknown || in.Short() != "dev" || in.GoVersion != runtime.Version() {
		t.Fatalf("Read() = %+v", in)
	}
	if !strings.Contains(in.String(), "revision unknown") {
		t.Fatalf("String() = %q", in.String())
	}
}
