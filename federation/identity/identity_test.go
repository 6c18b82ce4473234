package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func TestHost(t *testing.T) {
	for h, ok := range map[string]bool{
		"a": true, "alpha": true, "fleet01": true, "a-b-c": true, strings.Repeat("a", 32): true,
		"": false, "1host": false, "Alpha": false, "a_b": false, "a.b": false, "-a": false,
		strings.Repeat("a", 33): false, "a b": false, "é": false,
	} {
		if ValidHost(h) != ok {
			t.Errorf("ValidHost(%q) = %v, want %v", h, !ok, ok)
		}
		if err := CheckHost(h); (err == nil) != ok || (err != nil && !strings.Contains(err.Error(), HostPattern)) {
			t.Errorf("CheckHost(%q) = %v", h, err)
		}
	}
	for hn, want := range map[string]string{
		"Fleet01.example.com": "fleet01", "mac-mini.local": "mac-mini", "ALPHA": "alpha", "beta": "beta",
	} {
		if got, err := HostFromHostname(hn); err != nil || got != want {
			t.Errorf("HostFromHostname(%q) = %q, %v; want %q", hn, got, err, want)
		}
	}
	for _, hn := range []string{"my_box", "3com", strings.Repeat("x", 40) + ".lan", ""} {
		_, err := HostFromHostname(hn)
		if err == nil || !strings.Contains(err.Error(), "set [federation] host") {
			t.Errorf("HostFromHostname(%q): %v, want an error telling to set [federation] host", hn, err)
		}
	}
}

func TestPublicKeyText(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	s := FormatPublicKey(pub)
	if !strings.HasPrefix(s, "ed25519:") || len(s) != len("ed25519:")+44 {
		t.Fatalf("FormatPublicKey = %q", s)
	}
	back, err := ParsePublicKey(s)
	if err != nil || !back.Equal(pub) {
		t.Fatalf("round trip: %v %v", back, err)
	}
	if back, err := ParsePublicKey(strings.TrimRight(s, "=")); err != nil || !back.Equal(pub) {
		t.Fatalf("unpadded: %v", err)
	}
	for in, want := range map[string]string{
		"ssh-ed25519:AAAA":  "must start with",
		"ed25519:!!!!":      "not standard base64",
		"ed25519:" + "AAAA": "3 bytes",
		"ed25519:" + strings.Repeat("A", 86) + "==": "64 bytes",
	} {
		if _, err := ParsePublicKey(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParsePublicKey(%q) = %v, want %q", in, err, want)
		}
	}
}

func TestKeyFileCreateLoad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	path := filepath.Join(dir, "federation.key")
	k1, created, err := LoadOrCreateKey(path)
	if err != nil || !created {
		t.Fatalf("create: %v created=%v", err, created)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v", st.Mode(), err)
	}
	if dst, _ := os.Stat(dir); dst.Mode().Perm() != 0o700 {
		t.Errorf("directory created %v, want 0700", dst.Mode().Perm())
	}
	k2, created, err := LoadOrCreateKey(path)
	if err != nil || created || !k2.Equal(k1) {
		t.Fatalf("load again: created=%v err=%v same=%v", created, err, k2.Equal(k1))
	}
	// The file is PEM PKCS#8, readable by other tools.
	b, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(b), "-----BEGIN PRIVATE KEY-----\n") {
		t.Fatalf("key file is not PEM PKCS#8:\n%s", b)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("temporary files left behind: %v", ents)
	}
}

func TestKeyFileConcurrentCreate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "federation.key")
	var wg sync.WaitGroup
	keys := make([]ed25519.PrivateKey, 8)
	errs := make([]error, 8)
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys[i], _, errs[i] = LoadOrCreateKey(path)
		}()
	}
	wg.Wait()
	for i := range keys {
		if errs[i] != nil || !keys[i].Equal(keys[0]) {
			t.Fatalf("creator %d: err %v, same key %v", i, errs[i], keys[i].Equal(keys[0]))
		}
	}
}

func TestKeyFileRefusals(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.key")
	if _, _, err := LoadOrCreateKey(good); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(good)
	write := func(name string, b []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name, path, want string
	}{
		{"group readable", write("g.key", data, 0o640), "chmod 600"},
		{"world readable", write("w.key", data, 0o604), "mode 0604"},
		{"not PEM", write("junk.key", []byte("hello\n"), 0o600), "PEM"},
		{"trailing text", write("trail.key", append(append([]byte{}, data...), "more"...), 0o600), "text after"},
		{"other key type", write("rsa.key", []byte("-----BEGIN PRIVATE KEY-----\nMAA=\n-----END PRIVATE KEY-----\n"), 0o600), "PKCS #8"},
	}
	link := filepath.Join(dir, "link.key")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	cases = append(cases, struct{ name, path, want string }{"symlink", link, "symbolic link"})
	fifo := filepath.Join(dir, "fifo.key")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cases = append(cases, struct{ name, path, want string }{"fifo", fifo, "not a regular file"})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := LoadOrCreateKey(tc.path)
			var ke *KeyFileError
			if !errors.As(err, &ke) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
				t.Fatalf("err = %v, want a KeyFileError naming %s and saying %q", err, tc.path, tc.want)
			}
		})
	}
	if _, err := LoadKey(filepath.Join(dir, "missing.key")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
	if os.Geteuid() == 0 {
		p := write("other.key", data, 0o600)
		if err := os.Chown(p, 12345, 12345); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadKey(p); err == nil || !strings.Contains(err.Error(), "owned by uid 12345") {
			t.Errorf("foreign owner: %v", err)
		}
	}
}

func TestCapabilities(t *testing.T) {
	for in, want := range map[string]Capabilities{
		"all": CapAll, "presence": 0, "read": CapRead, "control": CapControl, "calls": CapCalls,
		"control,calls": CapControl | CapCalls, "calls,read": CapCalls | CapRead,
	} {
		got, err := ParseCapabilities(in)
		if err != nil || got != want {
			t.Errorf("ParseCapabilities(%q) = %v, %v; want %v", in, got, err, want)
		}
		if back, _ := ParseCapabilities(got.String()); back != got {
			t.Errorf("String round trip of %q: %q", in, got.String())
		}
	}
	for in, want := range map[string]string{
		"": "unknown capability", "write": "unknown capability", "read,read": "twice",
		"all,read": "stands alone", "read,presence": "stands alone", "read,": "unknown capability",
	} {
		if _, err := ParseCapabilities(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCapabilities(%q) = %v, want %q", in, err, want)
		}
	}
	if !CapControl.Has(CapRead) || CapRead.Has(CapControl) || CapCalls.Has(CapRead) || Capabilities(0).Has(CapRead) || !CapAll.Has(CapCalls|CapControl) {
		t.Error("Has: control implies read, nothing else implies anything")
	}
}

func TestTrustLines(t *testing.T) {
	pa, _, _ := ed25519.GenerateKey(rand.Reader)
	pb, _, _ := ed25519.GenerateKey(rand.Reader)
	pb2, _, _ := ed25519.GenerateKey(rand.Reader)
	la := FormatTrustLine("alpha", pa, CapAll)
	if la != "alpha "+FormatPublicKey(pa) {
		t.Fatalf("FormatTrustLine = %q", la)
	}
	lb := FormatTrustLine("beta", pb, CapControl|CapCalls)
	if !strings.HasSuffix(lb, " control,calls") {
		t.Fatalf("with caps: %q", lb)
	}
	p, err := ParseTrustLine("  beta\t" + FormatPublicKey(pb) + "  read ")
	if err != nil || p.Host != "beta" || !p.Key.Equal(pb) || p.Caps != CapRead {
		t.Fatalf("ParseTrustLine: %+v %v", p, err)
	}
	tr, err := ParseTrust([]string{la, lb, FormatTrustLine("beta", pb2, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := tr.ByKey(pb2); !ok || got.Host != "beta" || got.Caps != 0 {
		t.Fatalf("rotation key: %+v %v", got, ok)
	}
	if hs := tr.Hosts(); strings.Join(hs, ",") != "alpha,beta" || len(tr.Peers("beta")) != 2 {
		t.Fatalf("hosts %v peers %v", hs, tr.Peers("beta"))
	}
	if _, ok := tr.ByKey(ed25519.PublicKey{1, 2}); ok {
		t.Fatal("short key found")
	}

	_, err = ParseTrust([]string{
		la,                             // 0 fine
		"alpha",                        // 1 no key
		"Alpha " + FormatPublicKey(pb), // 2 bad host
		"gamma ed25519:x!z",            // 3 bad key
		"gamma " + FormatPublicKey(pa), // 4 alpha's key for gamma
		la,                             // 5 duplicate
		"delta " + FormatPublicKey(pb) + " write", // 6 bad capability
		"a b c d", // 7 too many fields
		"",        // 8 empty
	})
	if err == nil {
		t.Fatal("bad trust list accepted")
	}
	var tle *TrustLineError
	var idx []int
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		if !errors.As(e, &tle) {
			t.Fatalf("not a TrustLineError: %v", e)
		}
		idx = append(idx, tle.Index)
	}
	if len(idx) != 8 || idx[0] != 1 || idx[7] != 8 {
		t.Fatalf("errors for entries %v, want 1..8:\n%v", idx, err)
	}
	for _, want := range []string{"trust[1]", "no key", "trust[2]", "must match", "trust[3]", "base64", "trust[4]", "for host \"alpha\"", "trust[5]", "already trust[0]", "trust[6]", "unknown capability \"write\"", "trust[7]", "4 fields", "trust[8]", "empty"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestTrustWithSelf(t *testing.T) {
	pa, _, _ := ed25519.GenerateKey(rand.Reader)
	pb, _, _ := ed25519.GenerateKey(rand.Reader)
	tr, _ := ParseTrust([]string{FormatTrustLine("beta", pb, CapRead)})
	s, err := tr.WithSelf("alpha", pa)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := s.ByKey(pa); !ok || p.Host != "alpha" || p.Caps != CapAll {
		t.Fatalf("self: %+v %v", p, ok)
	}
	if _, ok := tr.ByKey(pa); ok {
		t.Fatal("WithSelf changed the original")
	}
	if _, err := tr.WithSelf("alpha", pb); err == nil || !strings.Contains(err.Error(), "\"beta\"") {
		t.Fatalf("own key listed for another host: %v", err)
	}
}
