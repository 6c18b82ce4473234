// Package herdr is a client for the JSON socket API of herdr, the terminal agent multiplexer
// (public repository ogulcancelik/herdr, also published as herdrdev/herdr), plus the on-disk
// session layout rules herdr uses. Paths cited as "herdr src/…" are files of that repository.
//
// Versions matched: herdr 0.8.2 (protocol 20; its source of 2026-08-22 and its JSON schema),
// 0.8.0 (protocol 19, the same JSON API) and 0.9.0–0.9.3 (protocol 22, from release notes and
// third-party compatibility reports); Releases and CheckCompat hold that knowledge.
// docs/herdr.md says what fleetmgr relies on, docs/ARCHITECTURE.md "herdr versions" how
// versions are reported. The client reads a server's version and protocol from ping and
// ignores unknown fields. Subscribe (events.subscribe) opens a stream of events on a connection
// of its own (herdr/events.go); HasPush says from ping's protocol whether a server has it.
//
// Wire protocol (herdr src/api/server.rs): one request per Unix-socket connection. The client
// writes one newline-terminated JSON line {"id":"<string>","method":"<dotted>","params":{…}} in
// a single write, reads one line back and closes. A success line carries "result" (an object
// whose "type" names its shape, "ok" for methods without data); a failure line carries
// "error":{"code","message"}, returned here as *Error.
//
// Session paths (herdr src/session.rs, src/config/io.rs): ConfigDir, SessionDir, SocketPath,
// ValidateSessionName, ListSessions and ScrubEnv reproduce herdr's own rules so that a
// supervisor and herdr agree on where a named session's socket lives.
package herdr
