// Produce keyed, headered, GZIP-compressed batches: node produce.mjs HOST:PORT TOPIC MODE COUNT TAG
// MODE: idempotent (idempotent: true, maxInFlightRequests: 1, acks -1) | acks-1 | acks1.
// Message i: key `k${i % 37}`, value `${TAG}-${i}`, headers {seq: String(i), tag: TAG}.
// The messages go out in two halves with a pause between; `splitTimestamp` lies strictly between
// the halves' timestamps, so fetchTopicOffsetsByTimestamp(splitTimestamp) must point at each
// partition's first second-half offset.
import { CompressionTypes } from 'kafkajs'
import { bootstrapArg, makeKafka, run } from './common.mjs'

const bootstrap = bootstrapArg()
const [topic, mode, countArg, tag] = process.argv.slice(3)
const count = parseInt(countArg, 10)
const CHUNK = 250
const sleep = (ms) => new Promise(resolve => setTimeout(resolve, ms))

const producerConfig = {
  idempotent: { idempotent: true, maxInFlightRequests: 1 },
  'acks-1': { allowAutoTopicCreation: false },
  acks1: { allowAutoTopicCreation: false }
}[mode]
const acks = mode === 'acks1' ? 1 : -1
if (!producerConfig || !topic || !(count > 0) || !tag) {
  console.error('usage: node produce.mjs HOST:PORT TOPIC idempotent|acks-1|acks1 COUNT TAG')
  process.exit(2)
}

const message = (i) => ({ key: `k${i % 37}`, value: `${tag}-${i}`, headers: { seq: String(i), tag } })

run(async () => {
  const kafka = makeKafka(bootstrap, `kaflet-kafkajs-producer-${mode}`)
  const producer = kafka.producer(producerConfig)
  const admin = kafka.admin()
  await producer.connect()
  await admin.connect()
  const results = []
  const sendRange = async (from, to) => {
    for (let start = from; start < to; start += CHUNK) {
      const messages = []
      for (let i = start; i < Math.min(start + CHUNK, to); i++) messages.push(message(i))
      // Alternate send() and sendBatch() so both code paths reach the broker.
      const meta = (start / CHUNK) % 2 === 0
        ? await producer.send({ topic, acks, compression: CompressionTypes.GZIP, messages })
        : await producer.sendBatch({ acks, compression: CompressionTypes.GZIP, topicMessages: [{ topic, messages }] })
      for (const m of meta) {
        results.push({ partition: m.partition, errorCode: m.errorCode, baseOffset: Number(m.baseOffset) })
      }
    }
  }
  try {
    const half = Math.floor(count / 2)
    await sendRange(0, half)
    await sleep(15)
    const splitTimestamp = Date.now()
    await sleep(15)
    await sendRange(half, count)
    const offsets = await admin.fetchTopicOffsets(topic)
    const bySplit = await admin.fetchTopicOffsetsByTimestamp(topic, splitTimestamp)
    const byPast = await admin.fetchTopicOffsetsByTimestamp(topic, splitTimestamp - 3600_000)
    const byFuture = await admin.fetchTopicOffsetsByTimestamp(topic, Date.now() + 3600_000)
    const norm = (xs) => Object.fromEntries(xs.map(x => [x.partition, x]))
    return {
      mode,
      half,
      sends: results,
      offsets: Object.fromEntries(offsets.map(o => [o.partition, { low: Number(o.low), high: Number(o.high) }])),
      offsetsAtSplit: Object.fromEntries(Object.entries(norm(bySplit)).map(([p, o]) => [p, Number(o.offset)])),
      offsetsAtPast: Object.fromEntries(Object.entries(norm(byPast)).map(([p, o]) => [p, Number(o.offset)])),
      offsetsAtFuture: Object.fromEntries(Object.entries(norm(byFuture)).map(([p, o]) => [p, Number(o.offset)]))
    }
  } finally {
    await producer.disconnect()
    await admin.disconnect()
  }
})
