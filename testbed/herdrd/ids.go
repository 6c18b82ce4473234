package herdrd

// idAlphabet is herdr's digit alphabet for public ids (herdr src/app/ids.rs): bijective base 32,
// so digit values 1..32 map to these characters in order.
const idAlphabet = "123456789ABCDEFGHJKMNPQRSTVWXYZ0"

// base32ID writes n >= 1 in bijective base 32 over idAlphabet: 1→"1", 32→"0", 33→"11".
func base32ID(n int) string {
	if n <= 0 {
		return ""
	}
	var b []byte
	for n > 0 {
		n--
		b = append(b, idAlphabet[n%32])
		n /= 32
	}
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}

// workspaceID is "w<N>".
func workspaceID(n int) string { return "w" + base32ID(n) }

// tabID is "<ws>:t<N>".
func tabID(ws string, n int) string { return ws + ":t" + base32ID(n) }

// paneID is "<ws>:p<N>".
func paneID(ws string, n int) string { return ws + ":p" + base32ID(n) }
