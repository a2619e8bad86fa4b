// Consumer-group read-back: node consume.mjs HOST:PORT TOPIC EXPECT GROUP
// Subscribes from the beginning, reads until EXPECT messages arrived (or 30 s passed), commits,
// leaves the group, then reads the group's committed offsets back through the admin API.
import { bootstrapArg, makeKafka, run } from './common.mjs'

const bootstrap = bootstrapArg()
const [topic, expectArg, groupId] = process.argv.slice(3)
const expected = parseInt(expectArg, 10)
if (!topic || !(expected >= 0) || !groupId) {
  console.error('usage: node consume.mjs HOST:PORT TOPIC EXPECT GROUP')
  process.exit(2)
}

const str = (b) => (b === null || b === undefined ? null : b.toString('utf8'))

run(async () => {
  const kafka = makeKafka(bootstrap, 'kaflet-kafkajs-consumer')
  const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 1000, maxWaitTimeInMs: 200 })
  const admin = kafka.admin()
  const partitions = {}
  let got = 0
  let done, fail
  const finished = new Promise((resolve, reject) => { done = resolve; fail = reject })
  consumer.on(consumer.events.CRASH, ({ payload }) => fail(payload.error))
  await consumer.connect()
  await admin.connect()
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        const headers = Object.fromEntries(Object.entries(message.headers || {}).map(([k, v]) =>
          [k, Array.isArray(v) ? v.map(str) : str(v)]))
        ;(partitions[partition] ||= []).push([Number(message.offset), str(message.key), str(message.value), headers])
        if (++got >= expected) done()
      }
    })
    if (expected === 0) done()
    const timer = setTimeout(done, 30000)
    try {
      await finished
    } finally {
      clearTimeout(timer)
    }
    await consumer.stop() // commits the resolved offsets
    await consumer.disconnect()
    const committed = await admin.fetchOffsets({ groupId, topics: [topic] })
    return {
      got,
      partitions,
      committed: Object.fromEntries(committed[0].partitions.map(p => [p.partition, Number(p.offset)]))
    }
  } finally {
    await consumer.disconnect()
    await admin.disconnect()
  }
})
