// Pipelined produce: node concurrent.mjs HOST:PORT TOPIC MODE SENDS PER_SEND TAG
// MODE: idempotent (idempotent: true, maxInFlightRequests: 1) | plain (no in-flight limit).
// Fires SENDS send() calls at once (not awaited one by one), each with PER_SEND GZIP messages:
// message (j, i) has key `k${i}`, value `${TAG}-${j}-${i}`, headers {send: String(j)}.
import { CompressionTypes } from 'kafkajs'
import { bootstrapArg, makeKafka, run } from './common.mjs'

const bootstrap = bootstrapArg()
const [topic, mode, sendsArg, perSendArg, tag] = process.argv.slice(3)
const sends = parseInt(sendsArg, 10)
const perSend = parseInt(perSendArg, 10)
if (!topic || !['idempotent', 'plain'].includes(mode) || !(sends > 0) || !(perSend > 0) || !tag) {
  console.error('usage: node concurrent.mjs HOST:PORT TOPIC idempotent|plain SENDS PER_SEND TAG')
  process.exit(2)
}

run(async () => {
  const kafka = makeKafka(bootstrap, `kaflet-kafkajs-concurrent-${mode}`)
  const producer = kafka.producer(mode === 'idempotent' ? { idempotent: true, maxInFlightRequests: 1 } : {})
  const admin = kafka.admin()
  await producer.connect()
  await admin.connect()
  try {
    const jobs = []
    for (let j = 0; j < sends; j++) {
      const messages = []
      for (let i = 0; i < perSend; i++) messages.push({ key: `k${i}`, value: `${tag}-${j}-${i}`, headers: { send: String(j) } })
      jobs.push(producer.send({ topic, acks: -1, compression: CompressionTypes.GZIP, messages }))
    }
    const results = await Promise.all(jobs)
    const offsets = await admin.fetchTopicOffsets(topic)
    return {
      results: results.map(meta => meta.map(m => ({ partition: m.partition, errorCode: m.errorCode, baseOffset: Number(m.baseOffset) }))),
      offsets: Object.fromEntries(offsets.map(o => [o.partition, { low: Number(o.low), high: Number(o.high) }]))
    }
  } finally {
    await producer.disconnect()
    await admin.disconnect()
  }
})
