// One Credo 0.5 agent (DIDComm v1, askar wallet in a sqlite file) with @credo-ts/push-notifications 0.7.1,
// driven by tests/didcomm/test_credo_push_e2e.py as a real push-registration client of our mediator:
// `node credo_push_agent.mjs '<config json>'`, then one JSON command per stdin line; it answers each
// command and reports what happens as JSON lines on stdout. It gets mediation (RFC 0211) from the
// invitation at start and picks up with Pickup 2.0 polling until told to sleep.
//
// config: {label, home, walletKey, mediatorInvitationUrl, pollingIntervalMs?}
// commands: {id, cmd: "mediation"} -> {id, ok, state, connectionId}
//           {id, cmd: "discover", match} -> {id, ok, features: [id, ...]}   (Discover Features 1.0)
//           {id, cmd: "set-device-info", deviceToken, devicePlatform} -> {id, ok}   (nulls: remove)
//           {id, cmd: "get-device-info"} -> {id, ok, type, deviceToken?, devicePlatform?, code?}
//           {id, cmd: "create-invitation"} -> {id, ok, recipientKeys, routingKeys}   (a key on our keylist)
//           {id, cmd: "sleep"} -> {id, ok}   (message pickup stopped: no request reaches the mediator)
//           {id, cmd: "shutdown"} -> {id, ok} and exit 0
// events:   {event: "ready"}, {event: "processed", type}   (every message it processed from the mediator)
// The askar native library comes from LIB_ASKAR_PATH (scripts/ensure_extra_credo.sh).
import readline from 'node:readline'

import { askar } from '@openwallet-foundation/askar-nodejs'
import { AskarModule } from '@credo-ts/askar'
import {
  Agent,
  AgentEventTypes,
  ConsoleLogger,
  HttpOutboundTransport,
  KeyDerivationMethod,
  LogLevel,
  MediationRecipientModule,
  MediatorPickupStrategy,
  WsOutboundTransport,
} from '@credo-ts/core'
import { agentDependencies } from '@credo-ts/node'
import { NodeFileSystem } from '@credo-ts/node/build/NodeFileSystem.js'
import { PushNotificationsFcmModule } from '@credo-ts/push-notifications'

const config = JSON.parse(process.argv[2])
const emit = (obj) => process.stdout.write(`${JSON.stringify(obj)}\n`)
const FCM = 'https://didcomm.org/push-notifications-fcm/1.0/'

class HomeFileSystem extends NodeFileSystem {
  constructor() {
    super({ baseDataPath: config.home, baseCachePath: config.home, baseTempPath: config.home })
  }
}

const agent = new Agent({
  config: {
    label: config.label,
    walletConfig: {
      id: config.label,
      key: config.walletKey,
      keyDerivationMethod: KeyDerivationMethod.Raw,
    },
    logger: new ConsoleLogger(LogLevel.warn),
  },
  dependencies: { ...agentDependencies, FileSystem: HomeFileSystem },
  modules: {
    askar: new AskarModule({ ariesAskar: askar }),
    mediationRecipient: new MediationRecipientModule({
      mediatorInvitationUrl: config.mediatorInvitationUrl,
      mediatorPickupStrategy: MediatorPickupStrategy.PickUpV2,
      mediatorPollingInterval: config.pollingIntervalMs ?? 500,
    }),
    pushNotificationsFcm: new PushNotificationsFcmModule(),
  },
})
agent.registerOutboundTransport(new HttpOutboundTransport())
agent.registerOutboundTransport(new WsOutboundTransport())

// What the mediator sent and Credo processed, by type: the answers the commands wait for.
const waiting = []
agent.events.on(AgentEventTypes.AgentMessageProcessed, ({ payload }) => {
  const message = payload.message
  emit({ event: 'processed', type: message.type })
  for (const w of [...waiting]) {
    if (w.match(message)) {
      waiting.splice(waiting.indexOf(w), 1)
      w.resolve(message)
    }
  }
})
const next = (match, timeoutMs = 20000) =>
  new Promise((resolve, reject) => {
    const entry = { match, resolve }
    waiting.push(entry)
    setTimeout(() => {
      if (waiting.includes(entry)) {
        waiting.splice(waiting.indexOf(entry), 1)
        reject(new Error('no answer from the mediator'))
      }
    }, timeoutMs)
  })

async function mediatorConnection() {
  const mediator = await agent.mediationRecipient.findDefaultMediator()
  if (!mediator) throw new Error('no mediator')
  return mediator
}

const commands = {
  async mediation() {
    const mediator = await mediatorConnection()
    return { state: mediator.state, connectionId: mediator.connectionId }
  },
  async discover({ match }) {
    const { connectionId } = await mediatorConnection()
    const { features } = await agent.discovery.queryFeatures({
      connectionId,
      protocolVersion: 'v1',
      queries: [{ featureType: 'protocol', match }],
      awaitDisclosures: true,
      awaitDisclosuresTimeoutMs: 15000,
    })
    return { features: (features ?? []).map((f) => f.id) }
  },
  async 'set-device-info'({ deviceToken, devicePlatform }) {
    const { connectionId } = await mediatorConnection()
    await agent.modules.pushNotificationsFcm.setDeviceInfo(connectionId, { deviceToken, devicePlatform })
    return {}
  },
  async 'get-device-info'() {
    const { connectionId } = await mediatorConnection()
    const answer = next((m) => m.type === `${FCM}device-info` || m.type === `${FCM}problem-report`)
    await agent.modules.pushNotificationsFcm.getDeviceInfo(connectionId)
    const message = await answer
    if (message.type === `${FCM}device-info`) {
      return { type: message.type, deviceToken: message.deviceToken, devicePlatform: message.devicePlatform }
    }
    return { type: message.type, code: message.description?.code }
  },
  async 'create-invitation'() {
    const { outOfBandInvitation } = await agent.oob.createInvitation()
    const [service] = outOfBandInvitation.getServices()
    return { recipientKeys: service.recipientKeys, routingKeys: service.routingKeys }
  },
  async sleep() {
    await agent.mediationRecipient.stopMessagePickup()
    return {}
  },
  async shutdown() {
    await agent.mediationRecipient.stopMessagePickup()
    await agent.shutdown()
    setTimeout(() => process.exit(0), 10)
    return {}
  },
}

try {
  await agent.initialize()
} catch (error) {
  emit({ event: 'fatal', error: String(error?.stack ?? error) })
  process.exit(1)
}
emit({ event: 'ready' })

const input = readline.createInterface({ input: process.stdin })
input.on('line', async (line) => {
  let request
  try {
    request = JSON.parse(line)
  } catch {
    return
  }
  const run = commands[request.cmd]
  try {
    if (!run) throw new Error(`unknown command ${request.cmd}`)
    emit({ id: request.id, ok: true, ...(await run(request)) })
  } catch (error) {
    emit({ id: request.id, ok: false, error: String(error?.message ?? error) })
  }
})
input.on('close', () => process.exit(0))
