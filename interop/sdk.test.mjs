// Interop check: the official MCP TypeScript SDK (@modelcontextprotocol/sdk)
// drives a running `fleetmgr serve` over streamable HTTP and over the stdio
// mount (`fleetmgr mcp`). Run by e2e/interop_test.go, which starts the
// daemon and two stand-in fleets and passes:
//
//   FLEETMGR_URL     http://127.0.0.1:PORT/mcp
//   FLEETMGR_BIN     path of the fleetmgr binary (for the stdio mount)
//   FLEETMGR_CONFIG  its fleets.toml
//   FLEETMGR_EVENTS  the stand-in's events file ("cancelled fleet_slow")
//   FLEETMGR_FLEET   the fleet to call (running)
//
// e2e/TestInteropRemoteFleet runs the "remote fleet" test alone (the others
// skip without FLEETMGR_FLEET), against a manager federated with another
// host, and passes:
//
//   FLEETMGR_REMOTE_FLEET   a fleet of the other host, NAME@HOST
//   FLEETMGR_REMOTE_EVENTS  the other host's stand-in events file
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set (this script is run by e2e/interop_test.go)`);
  return v;
};
const url = env("FLEETMGR_URL");
const remoteFleet = process.env.FLEETMGR_REMOTE_FLEET;
const fleet = remoteFleet ? process.env.FLEETMGR_FLEET : env("FLEETMGR_FLEET");
const local = { skip: fleet ? false : "FLEETMGR_FLEET is not set (a remote-fleet run)" };

async function connectHTTP() {
  const client = new Client({ name: "fleetmgr-interop", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return client;
}

function countCancelled(events = env("FLEETMGR_EVENTS"), line = "cancelled fleet_slow") {
  try {
    return readFileSync(events, "utf8").split("\n").filter((l) => l === line).length;
  } catch {
    return 0;
  }
}

test("tools/list: one merged set, fleet required with an enum", local, async () => {
  const client = await connectHTTP();
  try {
    assert.equal(client.getServerCapabilities()?.tools?.listChanged, true, "listChanged advertised");
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name);
    for (const n of ["fleet_whoami", "fleet_slow", "fleetmgr_list"]) assert.ok(names.includes(n), `${n} listed: ${names}`);
    assert.equal(new Set(names).size, names.length, "each tool once");
    for (const t of tools) assert.match(t.name, /^[a-zA-Z0-9_-]{1,64}$/);
    const whoami = tools.find((t) => t.name === "fleet_whoami");
    assert.ok(whoami.inputSchema.required.includes("fleet"));
    assert.ok(whoami.inputSchema.properties.fleet.enum.includes(fleet));
  } finally {
    await client.close();
  }
});

test("tools/call with fleet reaches that fleet", local, async () => {
  const client = await connectHTTP();
  try {
    const res = await client.callTool({ name: "fleet_whoami", arguments: { fleet } });
    assert.ok(!res.isError, JSON.stringify(res));
    const out = JSON.parse(res.content[0].text);
    assert.equal(out.fleet, fleet);
    assert.equal(out.role, "primary");
  } finally {
    await client.close();
  }
});

test("progress notifications reach the caller", local, async () => {
  const client = await connectHTTP();
  try {
    const seen = [];
    const res = await client.callTool(
      { name: "fleet_slow", arguments: { fleet, seconds: 0.6, steps: 3 } },
      undefined,
      { onprogress: (p) => seen.push(p) },
    );
    assert.ok(!res.isError, JSON.stringify(res));
    assert.deepEqual(seen.map((p) => p.progress), [1, 2, 3]);
    assert.equal(seen[2].total, 3);
  } finally {
    await client.close();
  }
});

test("cancelling a call cancels it upstream", local, async () => {
  const client = await connectHTTP();
  try {
    const before = countCancelled();
    const ac = new AbortController();
    const call = client.callTool(
      { name: "fleet_slow", arguments: { fleet, seconds: 30, steps: 30 } },
      undefined,
      { signal: ac.signal, onprogress: () => ac.abort("operator changed their mind") },
    );
    await assert.rejects(call);
    for (let i = 0; i < 100 && countCancelled() <= before; i++) await sleep(50);
    assert.ok(countCancelled() > before, "the stand-in recorded `cancelled fleet_slow`");
  } finally {
    await client.close();
  }
});

test("stdio mount (fleetmgr mcp): list and call", local, async () => {
  const client = new Client({ name: "fleetmgr-interop-stdio", version: "1.0.0" });
  await client.connect(new StdioClientTransport({
    command: env("FLEETMGR_BIN"),
    args: ["--config", env("FLEETMGR_CONFIG"), "mcp", "--no-start"],
    env: process.env,
    stderr: "inherit",
  }));
  try {
    const { tools } = await client.listTools();
    assert.ok(tools.some((t) => t.name === "fleet_whoami"));
    const res = await client.callTool({ name: "fleet_whoami", arguments: { fleet } });
    assert.ok(!res.isError, JSON.stringify(res));
    assert.equal(JSON.parse(res.content[0].text).fleet, fleet);
  } finally {
    await client.close();
  }
});

test("remote fleet (NAME@HOST): listed, called, progress, cancellation", { skip: remoteFleet ? false : "FLEETMGR_REMOTE_FLEET is not set" }, async () => {
  const client = await connectHTTP();
  try {
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name);
    assert.equal(new Set(names).size, names.length, "each tool once");
    const whoami = tools.find((t) => t.name === "fleet_whoami");
    assert.ok(whoami.inputSchema.properties.fleet.enum.includes(remoteFleet), JSON.stringify(whoami.inputSchema.properties.fleet));
    const name = remoteFleet.split("@")[0];

    const res = await client.callTool({ name: "fleet_whoami", arguments: { fleet: remoteFleet } });
    assert.ok(!res.isError, JSON.stringify(res));
    const out = JSON.parse(res.content[0].text);
    assert.equal(out.fleet, name, "answered by the other host's fleetd");
    assert.equal(out.role, "primary");

    const seen = [];
    const slow = await client.callTool(
      { name: "fleet_slow", arguments: { fleet: remoteFleet, seconds: 0.6, steps: 3 } },
      undefined,
      { onprogress: (p) => seen.push(p) },
    );
    assert.ok(!slow.isError, JSON.stringify(slow));
    assert.deepEqual(seen.map((p) => p.progress), [1, 2, 3]);

    const events = env("FLEETMGR_REMOTE_EVENTS");
    const before = countCancelled(events);
    const ac = new AbortController();
    const call = client.callTool(
      { name: "fleet_slow", arguments: { fleet: remoteFleet, seconds: 30, steps: 30 } },
      undefined,
      { signal: ac.signal, onprogress: () => ac.abort("operator changed their mind") },
    );
    await assert.rejects(call);
    for (let i = 0; i < 200 && countCancelled(events) <= before; i++) await sleep(50);
    assert.ok(countCancelled(events) > before, "the other host's stand-in recorded `cancelled fleet_slow`");
  } finally {
    await client.close();
  }
});
