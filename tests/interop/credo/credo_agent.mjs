// One Credo 0.6 agent (DIDComm v1, askar wallet in a sqlite file) driven by the tests as an independent
// mediation client, or by the benchmark as a mediator: `node credo_agent.mjs '<config json>'`, then one
// JSON command per stdin line; it answers each command and reports what happens as JSON lines on stdout.
//
// config: {label, walletPath, walletKey, mediatorInvitationUrl?, pickup?: "PickUpV1" | "PickUpV2" | "PickUpV2LiveMode",
//          pollingIntervalMs?, mediatorPort?}
// mediatorPort: Credo's mediator (auto-granting, forwards queued for pickup) behind an HTTP inbound transport
//          on 127.0.0.1:mediatorPort, as @credo-ts/node's HttpInboundTransport serves it.
// commands: {id, cmd: "create-invitation", multiUse?} -> {id, ok, url}
//           {id, cmd: "receive-invitation", url} -> {id, ok, connectionId} once the connection completes
//           {id, cmd: "send-message", connectionId, content} -> {id, ok}
//           {id, cmd: "mediation"} -> {id, ok, state, endpoint, routingKeys, recipientKeys}
//           {id, cmd: "shutdown"} -> {id, ok} and exit 0
// events:   {event: "ready"}, {event: "mediation", state}, {event: "connection", connectionId, state},
//           {event: "basic-message", connectionId, content}, {event: "socket", state}, {event: "socket-frame"}
// The askar native library comes from LIB_ASKAR_PATH (scripts/ensure_extra_credo.sh).
import { EventEmitter } from 'node:events'
import { promises as fs } from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import readline from 'node:readline'

import { askar } from '@openwallet-foundation/askar-nodejs'
import { AskarModule } from '@credo-ts/askar'
import { Agent, ConsoleLogger, LogLevel } from '@credo-ts/core'
import {
  DidCommBasicMessageEventTypes,
  DidCommBasicMessageRole,
  DidCommConnectionEventTypes,
  DidCommDidExchangeState,
  DidCommHttpOutboundTransport,
  DidCommMediatorPickupStrategy,
  DidCommMessageForwardingStrategy,
  DidCommMessageReceiver,
  DidCommModule,
  DidCommRoutingEventTypes,
  DidCommTransportService,
  DidCommWsOutboundTransport,
} from '@credo-ts/didcomm'
import WebSocket from 'ws'

const config = JSON.parse(process.argv[2])
const emit = (obj) => process.stdout.write(`${JSON.stringify(obj)}\n`)

// @credo-ts/node has no 0.6 release (npm has 0.5.x and a 0.6 alpha), so the few Node dependencies
// Credo needs are given here: a FileSystem on node:fs, fetch, ws and EventEmitter.
class NodeFileSystem {
  constructor(base) {
    this.dataPath = path.join(base, 'data')
    this.cachePath = path.join(base, 'cache')
    this.tempPath = path.join(base, 'tmp')
  }
  async exists(p) {
    return fs.access(p).then(
      () => true,
      () => false
    )
  }
  async createDirectory(p) {
    await fs.mkdir(path.dirname(p), { recursive: true })
  }
  async copyFile(a, b) {
    await fs.copyFile(a, b)
  }
  async write(p, data) {
    await fs.mkdir(path.dirname(p), { recursive: true })
    await fs.writeFile(p, data, 'utf-8')
  }
  async read(p) {
    return fs.readFile(p, 'utf-8')
  }
  async delete(p) {
    await fs.rm(p, { recursive: true, force: true })
  }
  async downloadToFile() {
    throw new Error('downloads are not used by these tests')
  }
}
// The tests need to see that a message came over the socket (live mode) and not by polling: report the
// socket's own open, frame and close events (ws), whatever Credo does with them.
class ObservedWebSocket extends WebSocket {
  constructor(...args) {
    super(...args)
    this.on('open', () => emit({ event: 'socket', state: 'open' }))
    this.on('message', () => emit({ event: 'socket-frame' }))
    this.on('close', () => emit({ event: 'socket', state: 'closed' }))
  }
}
const home = path.dirname(config.walletPath)
const dependencies = {
  FileSystem: class extends NodeFileSystem {
    constructor() {
      super(home)
    }
  },
  EventEmitterClass: EventEmitter,
  fetch,
  WebSocketClass: ObservedWebSocket,
}

const mediationRecipient = config.mediatorInvitationUrl
  ? {
      mediatorInvitationUrl: config.mediatorInvitationUrl,
      mediatorPickupStrategy: DidCommMediatorPickupStrategy[config.pickup ?? 'PickUpV2'],
      mediatorPollingInterval: config.pollingIntervalMs ?? 1000,
      baseMediatorReconnectionIntervalMs: 200,
      maximumMediatorReconnectionIntervalMs: 1000,
    }
  : false

// @credo-ts/node's HttpInboundTransport on node:http: one POST of an envelope is one session; an answer
// on the return route is the response body, otherwise 200 once the message is handled.
class HttpSession {
  constructor(res) {
    this.id = crypto.randomUUID()
    this.type = 'http'
    this.res = res
  }
  async send(_agentContext, encryptedMessage) {
    if (this.res.headersSent) throw new Error('http transport session has been closed')
    this.res.writeHead(200, { 'Content-Type': 'application/didcomm-envelope-enc' })
    this.res.end(JSON.stringify(encryptedMessage))
  }
  async close() {
    if (!this.res.headersSent) this.res.writeHead(200).end()
  }
}
class HttpInboundTransport {
  constructor(port) {
    this.port = port
  }
  async start(agentContext) {
    const receiver = agentContext.dependencyManager.resolve(DidCommMessageReceiver)
    const sessions = agentContext.dependencyManager.resolve(DidCommTransportService)
    this.server = http.createServer((req, res) => {
      const chunks = []
      req.on('data', (c) => chunks.push(c))
      req.on('end', async () => {
        if (req.method !== 'POST') return res.writeHead(405).end()
        const session = new HttpSession(res)
        try {
          await receiver.receiveMessage(JSON.parse(Buffer.concat(chunks).toString()), { session })
          if (!res.headersSent) res.writeHead(200).end()
        } catch (error) {
          if (!res.headersSent) res.writeHead(500).end('Error when processing message')
        } finally {
          sessions.removeSession(session)
        }
      })
    })
    await new Promise((resolve) => this.server.listen(this.port, '127.0.0.1', resolve))
  }
  async stop() {
    await new Promise((resolve) => this.server.close(resolve))
  }
}

const agent = new Agent({
  config: {
    allowInsecureHttpUrls: true,
    logger: new ConsoleLogger(process.env.CREDO_LOG === 'debug' ? LogLevel.debug : LogLevel.warn),
  },
  dependencies,
  modules: {
    askar: new AskarModule({
      askar,
      store: {
        id: config.label,
        key: config.walletKey,
        keyDerivationMethod: 'raw',
        database: { type: 'sqlite', config: { path: config.walletPath } },
      },
    }),
    didcomm: new DidCommModule({
      // No inbound transport (like a phone wallet, everything comes back on return routes) unless a mediator.
      transports: {
        inbound: config.mediatorPort ? [new HttpInboundTransport(config.mediatorPort)] : [],
        outbound: [new DidCommHttpOutboundTransport(), new DidCommWsOutboundTransport()],
      },
      endpoints: config.mediatorPort ? [`http://127.0.0.1:${config.mediatorPort}`] : undefined,
      // DIDCOMM-NOTES: a forwarded DID Exchange request makes the recipient send a keylist-update
      // and wait for its answer; handled one at a time, that stalls 15 s. A mediator keeps Credo's default
      // (each message handled before its HTTP response, so an answer can take the return route).
      processDidCommMessagesConcurrently: !config.mediatorPort,
      connections: { autoAcceptConnections: true },
      credentials: false,
      proofs: false,
      mediator: config.mediatorPort
        ? { autoAcceptMediationRequests: true, messageForwardingStrategy: DidCommMessageForwardingStrategy.QueueOnly }
        : false,
      mediationRecipient,
    }),
  },
})

agent.events.on(DidCommRoutingEventTypes.MediationStateChanged, ({ payload }) =>
  emit({ event: 'mediation', state: payload.mediationRecord.state })
)
agent.events.on(DidCommConnectionEventTypes.DidCommConnectionStateChanged, ({ payload }) =>
  emit({ event: 'connection', connectionId: payload.connectionRecord.id, state: payload.connectionRecord.state })
)
agent.events.on(DidCommBasicMessageEventTypes.DidCommBasicMessageStateChanged, ({ payload }) => {
  if (payload.basicMessageRecord.role === DidCommBasicMessageRole.Receiver) {
    emit({
      event: 'basic-message',
      connectionId: payload.basicMessageRecord.connectionId,
      content: payload.message.content,
    })
  }
})

function waitForConnection(outOfBandId) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('connection not completed in 30 s')), 30_000)
    const listener = ({ payload }) => {
      const record = payload.connectionRecord
      if (record.outOfBandId === outOfBandId && record.state === DidCommDidExchangeState.Completed) {
        clearTimeout(timer)
        agent.events.off(DidCommConnectionEventTypes.DidCommConnectionStateChanged, listener)
        resolve(record)
      }
    }
    agent.events.on(DidCommConnectionEventTypes.DidCommConnectionStateChanged, listener)
  })
}

const handlers = {
  async 'create-invitation'({ multiUse }) {
    const record = await agent.didcomm.oob.createInvitation({ multiUseInvitation: multiUse ?? false })
    return { url: record.outOfBandInvitation.toUrl({ domain: 'https://example.org' }), outOfBandId: record.id }
  },
  async 'receive-invitation'({ url }) {
    const { outOfBandRecord, connectionRecord } = await agent.didcomm.oob.receiveInvitationFromUrl(url, {
      label: config.label,
    })
    const done =
      connectionRecord?.state === DidCommDidExchangeState.Completed
        ? connectionRecord
        : await waitForConnection(outOfBandRecord.id)
    return { connectionId: done.id }
  },
  async 'wait-connection'({ outOfBandId }) {
    const [existing] = await agent.didcomm.connections.findAllByOutOfBandId(outOfBandId)
    const done = existing?.state === DidCommDidExchangeState.Completed ? existing : await waitForConnection(outOfBandId)
    return { connectionId: done.id }
  },
  async 'send-message'({ connectionId, content }) {
    await agent.didcomm.basicMessages.sendMessage(connectionId, content)
    return {}
  },
  async mediation() {
    const record = await agent.didcomm.mediationRecipient.findDefaultMediator()
    return {
      state: record?.state ?? null,
      endpoint: record?.endpoint ?? null,
      routingKeys: record?.routingKeys ?? [],
      recipientKeys: record?.recipientKeys ?? [],
    }
  },
  async shutdown() {
    await agent.shutdown()
    return {}
  },
}

async function main() {
  await agent.initialize()
  if (mediationRecipient) {
    const record = await agent.didcomm.mediationRecipient.findDefaultMediator()
    emit({ event: 'ready', mediation: record?.state ?? null })
  } else {
    emit({ event: 'ready', mediation: null })
  }
  const lines = readline.createInterface({ input: process.stdin })
  for await (const line of lines) {
    if (!line.trim()) continue
    const command = JSON.parse(line)
    const handler = handlers[command.cmd]
    try {
      if (!handler) throw new Error(`unknown command ${command.cmd}`)
      emit({ id: command.id, ok: true, ...(await handler(command)) })
    } catch (error) {
      emit({ id: command.id, ok: false, error: String(error?.stack ?? error) })
    }
    if (command.cmd === 'shutdown') process.exit(0)
  }
  await agent.shutdown()
}

main().catch((error) => {
  emit({ event: 'fatal', error: String(error?.stack ?? error) })
  process.exit(1)
})

