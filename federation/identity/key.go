package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/fleetmgr/fleetmgr/atomicfile"
	"github.com/fleetmgr/fleetmgr/privdir"
)

// KeyPrefix starts the text form of a public key: "ed25519:" followed by
// the 32-byte key in standard base64 with padding (44 characters).
const KeyPrefix = "ed25519:"

// pemType is the PEM block type of the key file: PKCS #8 (RFC 5958), the
// form `openssl pkey` reads and writes for ed25519 keys (RFC 8410).
const pemType = "PRIVATE KEY"

// maxKeyFile bounds what LoadKey reads: a PEM ed25519 key is 119 bytes.
const maxKeyFile = 4096

// FormatPublicKey returns pub as "ed25519:BASE64".
func FormatPublicKey(pub ed25519.PublicKey) string {
	return KeyPrefix + base64.StdEncoding.EncodeToString(pub)
}

// ParsePublicKey parses "ed25519:BASE64" (standard base64, padded or not)
// into a 32-byte public key.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	rest, ok := strings.CutPrefix(s, KeyPrefix)
	if !ok {
		return nil, fmt.Errorf("key %q must start with %q", clip(s), KeyPrefix)
	}
	b, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		b, err = base64.RawStdEncoding.DecodeString(rest)
	}
	if err != nil {
		return nil, fmt.Errorf("key %q is not standard base64: %v", clip(s), err)
	}
	if len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("key %q is %d bytes, an ed25519 public key is %d", clip(s), len(b), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// clip shortens s for messages.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// KeyFileError is a key file LoadKey refuses: wrong owner, permissions
// wider than the owner's, not a regular file, or not an ed25519 key.
type KeyFileError struct {
	// Path is the key file.
	Path string
	// Msg says what is wrong and what to do.
	Msg string
}

// Error names the file.
func (e *KeyFileError) Error() string { return "federation key file " + e.Path + ": " + e.Msg }

// LoadKey reads the ed25519 private key at path (PEM, PKCS #8). The file
// must be a regular file owned by this process's effective uid with no
// permission for group or others (0600 or 0400); anything else is a
// *KeyFileError that says how to fix it. A missing file is returned as an
// error wrapping fs.ErrNotExist.
func LoadKey(path string) (ed25519.PrivateKey, error) {
	// O_NOFOLLOW: the key is this file, not whatever a link points at;
	// O_NONBLOCK: a FIFO planted at the path must not hang the open.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, &KeyFileError{Path: path, Msg: "is a symbolic link; name the key file itself"}
		}
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if p := privdir.FileProblem(path, st); p != "" {
		return nil, &KeyFileError{Path: path, Msg: p + " (a key others can read may have leaked, and one they can replace is not this host's: if so, make a new key)"}
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxKeyFile {
		return nil, &KeyFileError{Path: path, Msg: fmt.Sprintf("more than %d bytes: not a PEM ed25519 key", maxKeyFile)}
	}
	return parseKeyPEM(path, b)
}

// parseKeyPEM decodes one PEM PKCS #8 ed25519 private key.
func parseKeyPEM(path string, b []byte) (ed25519.PrivateKey, error) {
	blk, rest := pem.Decode(b)
	if blk == nil || blk.Type != pemType {
		return nil, &KeyFileError{Path: path, Msg: "not a PEM \"PRIVATE KEY\" block (want an ed25519 key in PKCS #8, as fleetmgr writes it or `openssl genpkey -algorithm ed25519` makes it)"}
	}
	if len(strings.TrimSpace(string(rest))) != 0 {
		return nil, &KeyFileError{Path: path, Msg: "text after the key block"}
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, &KeyFileError{Path: path, Msg: "not a PKCS #8 private key: " + err.Error()}
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, &KeyFileError{Path: path, Msg: fmt.Sprintf("a %T key, not ed25519", k)}
	}
	return ek, nil
}

// LoadOrCreateKey returns the key at path, creating it first when the file
// does not exist: a fresh ed25519 key pair, written 0600 to a temporary
// file in the same directory (created 0700 when missing), synced, then
// linked into place, so a crash leaves either no key or a whole one and
// two processes creating at once end with the same key. created reports
// whether this call made it. An existing file is checked as LoadKey does.
func LoadOrCreateKey(path string) (key ed25519.PrivateKey, created bool, err error) {
	key, err = LoadKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return key, false, err
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, false, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, false, err
	}
	data := pem.EncodeToMemory(&pem.Block{Type: pemType, Bytes: der})
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("federation key file %s: %w", path, err)
	}
	// A link never replaces: a key another process put there first wins
	// and is the one returned.
	created, err = atomicfile.Create(path, data, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("federation key file %s: %w", path, err)
	}
	if !created {
		k, err := LoadKey(path)
		return k, false, err
	}
	return priv, true, nil
}

// PublicKey returns the public half of key.
func PublicKey(key ed25519.PrivateKey) ed25519.PublicKey {
	return key.Public().(ed25519.PublicKey)
}
