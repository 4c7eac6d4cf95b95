// The Identus SDK 7.0.0 (npm @hyperledger/identus-sdk) as an independent DIDComm v2 RECIPIENT of our mediator.
//
//   node recipient.mjs <invitation URL>  [--record]
//   node recipient.mjs --selftest <OOB invitation JSON or ?_oob= URL>
//
// Everything on the wire is the SDK's own code: its Agent asks for mediation (Coordinate Mediation 2.0), adds a
// new peer DID (keylist-update), polls with Pickup 3.0 delivery-request, acks with messages-received, and in
// live mode opens the mediator's ws(s) service and sends live-delivery-change. This program only starts and
// stops agents on one in-memory store (as a wallet app restarting on its own storage would) and reports.
//
// stdout: one JSON object per line, {"event": ...}:
//   mediated {mediator_did, host_did, routing_did}   ready {peer_did}   offline   online {live}
//   live (the first frame the mediator sent on the socket)   message {id, piuri, from, to, body}
//   with --record, the exact bytes: wire {transport: "http", method, url, request_headers, request_body, status,
//   response_content_type, response_body} | wire {transport: "ws", direction: "out"|"in", body}; and
//   keys {did: [{curve, raw (base64url)}]}, the SDK's private keys of its DIDs (test keys, for replaying)
//   error {error}   selftest {mediator_did, invitation_id, mediator_services, peer_did}
// stdin, one command a line: "offline" (stop the agent), "pickup" (a new agent on the same store; it polls),
//   "live" (a new agent on the same store with live mode), "exit".
import readline from "node:readline";
import SDK from "@hyperledger/identus-sdk";
import WebSocket from "ws";

const emit = (event, fields = {}) => process.stdout.write(JSON.stringify({ event, ...fields }) + "\n");
// The SDK's ConsoleLogger writes to console.log; keep stdout for our JSON lines.
console.log = (...args) => process.stderr.write(args.map(String).join(" ") + "\n");
process.on("unhandledRejection", (e) => emit("error", { error: String(e?.stack ?? e) }));

const args = process.argv.slice(2);
const record = args.includes("--record");

// Node 20 has no WebSocket; the SDK calls `new WebSocket(uri)`. `ws` is what a Node app would give it.
// The subclass only reports the frames (and the first inbound one, which means live mode is on).
class ReportingWebSocket extends WebSocket {
  constructor(url, protocols) {
    super(url, protocols);
    this.addEventListener("message", (event) => {
      if (record) emit("wire", { transport: "ws", direction: "in", body: String(event.data) });
      if (!this.sawFrame) emit("live");
      this.sawFrame = true;
    });
    this.addEventListener("close", (event) => emit("socket-closed", { code: event.code }));
  }
  send(data, ...rest) {
    if (record) emit("wire", { transport: "ws", direction: "out", body: String(data) });
    return super.send(data, ...rest);
  }
}
globalThis.WebSocket = ReportingWebSocket;

if (record) {
  const realFetch = globalThis.fetch;
  globalThis.fetch = async (url, init = {}) => {
    const response = await realFetch(url, init);
    const text = await response.clone().text();
    emit("wire", {
      transport: "http",
      method: init.method ?? "GET",
      url: String(url),
      request_headers: Object.fromEntries(new Headers(init.headers ?? {})),
      request_body: init.body ?? null,
      status: response.status,
      response_content_type: response.headers.get("content-type"),
      response_body: text,
    });
    return response;
  };
}

// An in-memory Pluto.Store: tables of models by uuid, with the selector subset Pluto's repositories use.
function matches(model, selector = {}) {
  return Object.entries(selector).every(([key, want]) => {
    if (key === "$or") return want.some((s) => matches(model, s));
    if (key === "$and") return want.every((s) => matches(model, s));
    if (key === "$nor") return !want.some((s) => matches(model, s));
    const have = model[key];
    if (want !== null && typeof want === "object" && !Array.isArray(want)) {
      return Object.entries(want).every(([op, value]) => {
        switch (op) {
          case "$eq": return have === value;
          case "$ne": return have !== value;
          case "$in": return value.includes(have);
          case "$nin": return !value.includes(have);
          case "$exists": return (have !== undefined) === value;
          case "$regex": return new RegExp(value, want.$options).test(have ?? "");
          case "$options": return true;
          default: throw new Error(`in-memory store: unsupported operator ${op}`);
        }
      });
    }
    return have === want;
  });
}

class MemoryStore {
  constructor() { this.tables = new Map(); }
  table(name) {
    if (!this.tables.has(name)) this.tables.set(name, new Map());
    return this.tables.get(name);
  }
  async query(name, query) { return [...this.table(name).values()].filter((m) => matches(m, query?.selector)); }
  async insert(name, model) { this.table(name).set(model.uuid, { ...model }); }
  async update(name, model) { this.table(name).set(model.uuid, { ...this.table(name).get(model.uuid), ...model }); }
  async delete(name, uuid) { this.table(name).delete(uuid); }
}

const apollo = new SDK.Apollo();
const castor = new SDK.Castor(apollo);
const pluto = new SDK.Pluto(new MemoryStore(), apollo);

function newAgent(mediatorDID, liveMode) {
  const agent = SDK.Agent.initialize({ apollo, castor, pluto, mediatorDID, options: { experiments: { liveMode } } });
  agent.addListener(SDK.ListenerKey.MESSAGE, (messages) => {
    for (const m of messages) {
      emit("message", {
        id: m.id,
        piuri: m.piuri,
        from: m.from?.toString() ?? null,
        to: m.to?.toString() ?? null,
        body: m.body,
      });
    }
  });
  return agent;
}

// The invitation as the SDK takes it: the JSON object, or the `…?_oob=<base64url>` URL form as a string.
async function invitationFrom(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`GET ${url}: HTTP ${response.status}`);
  const text = (await response.text()).trim();
  return (response.headers.get("content-type") ?? "").includes("json") ? JSON.parse(text) : text;
}

async function selftest(invitation) {
  // Offline: no mediator. The SDK's own OOB 2.0 parser and peer DID creation and resolution.
  const agent = newAgent(undefined, false);
  const oob = await agent.parseInvitation(invitation.startsWith("{") ? JSON.parse(invitation) : invitation);
  const peerDid = await agent.createNewPeerDID([], false);
  const mediatorDoc = await castor.resolveDID(oob.from);
  emit("selftest", {
    mediator_did: oob.from,
    invitation_id: oob.id,
    // in the SDK's order: it POSTs to the first DIDCommMessaging service and opens the first ws(s) one
    mediator_services: mediatorDoc.services.map((s) => ({ type: s.type, uri: s.serviceEndpoint.uri })),
    peer_did: peerDid.toString(),
  });
}

async function main() {
  if (args[0] === "--selftest") return selftest(args[1]);
  const url = args.find((a) => !a.startsWith("--"));
  if (!url) throw new Error("usage: recipient.mjs <invitation URL> [--record] | --selftest <invitation JSON or URL>");

  const probe = newAgent(undefined, false);
  const oob = await probe.parseInvitation(await invitationFrom(url));
  const mediatorDID = oob.from;

  let agent = newAgent(mediatorDID, false);
  await agent.start();
  const mediator = agent.connections.mediator;
  if (!mediator || mediator.state !== 4 /* GRANTED */) {
    throw new Error(`mediation not granted (connection state ${mediator?.state})`);
  }
  const { hostDID, routingDID } = mediator.asMediator();
  emit("mediated", { mediator_did: mediatorDID, host_did: hostDID.toString(), routing_did: routingDID.toString() });
  const peerDid = await agent.createNewPeerDID([], true);
  emit("ready", { peer_did: peerDid.toString() });
  if (record) {
    const keys = {};
    for (const did of [hostDID, peerDid]) {
      const privateKeys = await pluto.getDIDPrivateKeysByDID(SDK.Domain.DID.from(did.toString()));
      keys[did.toString()] = privateKeys.map((k) => ({ curve: k.curve, raw: Buffer.from(k.raw).toString("base64url") }));
    }
    emit("keys", { keys });
  }

  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    const command = line.trim();
    if (!command) continue;
    if (command === "offline") {
      await agent?.stop();
      agent = null;
      emit("offline");
    } else if (command === "pickup" || command === "live") {
      await agent?.stop();
      agent = newAgent(mediatorDID, command === "live");
      await agent.start();
      emit("online", { live: command === "live" });
    } else if (command === "exit") {
      break;
    } else {
      emit("error", { error: `unknown command ${command}` });
    }
  }
  await agent?.stop();
  process.exit(0);
}

main().catch((e) => {
  emit("error", { error: String(e?.stack ?? e) });
  process.exit(1);
});
