// An independent DIDComm v2 peer for the test suite: didcomm-node 0.4.1 (Rust didcomm compiled to WASM).
// Reads one JSON request on stdin: {docs: [DIDDoc], secrets: [Secret], jobs: [...]}, writes {results: [...]}.
// Jobs: {op: "pack", message, to, from, options} | {op: "forward", packed, to, routing_keys, enc_alg_anon}
//       | {op: "unpack", packed}.  Every result is {ok: true, ...} or {ok: false, error: "<name>: <message>"}.
"use strict";
const { Message } = require("didcomm-node");

class DocResolver {
  constructor(docs) { this.docs = new Map(docs.map((d) => [d.id, d])); }
  async resolve(did) { return this.docs.get(did) || null; }
}

class SecretResolver {
  constructor(secrets) { this.secrets = new Map(secrets.map((s) => [s.id, s])); }
  async get_secret(id) { return this.secrets.get(id) || null; }
  async find_secrets(ids) { return ids.filter((id) => this.secrets.has(id)); }
}

async function run(job, dids, secrets) {
  if (job.op === "pack") {
    const [packed, metadata] = await new Message(job.message).pack_encrypted(
      job.to, job.from || null, null, dids, secrets, { forward: false, ...(job.options || {}) });
    return { packed, metadata };
  }
  if (job.op === "forward") {
    const packed = await Message.wrap_in_forward(
      job.packed, {}, job.to, job.routing_keys, job.enc_alg_anon, dids);
    return { packed };
  }
  if (job.op === "unpack") {
    const [message, metadata] = await Message.unpack(job.packed, dids, secrets, {});
    return { message: message.as_value(), metadata };
  }
  throw new Error(`unknown op ${job.op}`);
}

async function main() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const request = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  const dids = new DocResolver(request.docs);
  const secrets = new SecretResolver(request.secrets);
  const results = [];
  for (const job of request.jobs) {
    try {
      results.push({ ok: true, ...(await run(job, dids, secrets)) });
    } catch (e) {
      results.push({ ok: false, error: `${e.name}: ${e.message}` });
    }
  }
  process.stdout.write(JSON.stringify({ results }));
}

main().catch((e) => { process.stderr.write(String(e && e.stack || e)); process.exit(1); });
