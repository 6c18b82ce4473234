// Package herdr is a client for the JSON socket API of herdr, the terminal agent multiplexer
// (public repository ogulcancelik/herdr; facts in /work/shared/ref/herdr-interface.md, cited
// below as "interface §X"), plus the on-disk session layout rules herdr uses.
//
// Wire protocol (interface §B): one request per Unix-socket connection. The client writes one
// newline-terminated JSON line {"id":"<string>","method":"<dotted>","params":{…}} in a single
// write, reads one line back and closes. A success line carries "result" (an object whose
// "type" names its shape, "ok" for methods without data); a failure line carries
// "error":{"code","message"}, returned here as *Error.
//
// Session paths (interface §A1/§A4): ConfigDir, SessionDir, SocketPath, ValidateSessionName,
// ListSessions and ScrubEnv reproduce herdr's own rules so that a supervisor and herdr agree on
// where a named session's socket lives.
package herdr
