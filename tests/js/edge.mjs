// Unusual records: node edge.mjs HOST:PORT TOPIC
// TOPIC must have 3 partitions and TOPIC-lat 1 partition with message.timestamp.type=LogAppendTime;
// TOPIC-auto must not exist (the producer's Metadata request auto-creates it).
// Explicit partitions and timestamps, null key, null value (tombstone), empty key/value,
// repeated and binary headers, a 256 KiB value, acks 0, uncompressed next to GZIP, a record over
// the broker's 1 MiB limit (rejected), LogAppendTime, topic auto-creation.
import { CompressionTypes } from 'kafkajs'
import { bootstrapArg, makeKafka, run } from './common.mjs'

const bootstrap = bootstrapArg()
const topic = process.argv[3]
const T0 = 1700000000000
const big = 'kaflet-'.repeat(Math.ceil(262144 / 7)).slice(0, 262144)
const sendResults = (meta) => meta.map(m => ({ partition: m.partition, errorCode: m.errorCode, baseOffset: Number(m.baseOffset) }))

run(async () => {
  const kafka = makeKafka(bootstrap, 'kaflet-kafkajs-edge')
  const producer = kafka.producer({ allowAutoTopicCreation: false, retry: { retries: 1 } })
  const autoProducer = kafka.producer() // allowAutoTopicCreation defaults to true
  const admin = kafka.admin()
  await producer.connect()
  await autoProducer.connect()
  await admin.connect()
  const sends = []
  const record = (label, meta) => sends.push({ label, results: sendResults(meta) })
  try {
    record('gzip-acks1', await producer.send({
      topic,
      acks: 1,
      compression: CompressionTypes.GZIP,
      messages: [
        { partition: 0, key: null, value: 'no-key', timestamp: String(T0) },
        { partition: 0, key: 'tomb', value: null, timestamp: String(T0 + 1000) },
        { partition: 1, key: 'multi', value: 'headers', headers: { multi: ['a', 'b'], bin: Buffer.from([0, 1, 2, 255]) }, timestamp: String(T0 + 2000) },
        { partition: 1, key: '', value: '', timestamp: String(T0 + 3000) },
        { partition: 2, key: 'big', value: big, timestamp: String(T0 + 4000) }
      ]
    }))
    record('none-acks-1', await producer.send({
      topic,
      acks: -1,
      compression: CompressionTypes.None,
      messages: [
        { partition: 0, key: 'plain', value: 'uncompressed', timestamp: String(T0 + 5000) },
        { partition: 1, key: 'plain', value: 'uncompressed', timestamp: String(T0 + 5000) }
      ]
    }))
    // acks 0 gets no response; the acks -1 send that follows on the same connection is answered
    // only after it, so the offsets below already include it.
    record('gzip-acks0', await producer.send({
      topic,
      acks: 0,
      compression: CompressionTypes.GZIP,
      messages: [{ partition: 2, key: 'fire', value: 'and-forget', timestamp: String(T0 + 6000) }]
    }))
    record('none-acks-1-after-acks0', await producer.send({
      topic,
      acks: -1,
      messages: [{ partition: 2, key: 'after', value: 'acks0', timestamp: String(T0 + 7000) }]
    }))
    let tooLarge = null
    try {
      await producer.send({ topic, acks: -1, messages: [{ partition: 1, key: 'huge', value: Buffer.alloc(1100000, 7) }] })
    } catch (e) {
      tooLarge = (e.cause || e).type || e.name
    }
    const beforeAppend = Date.now()
    const logAppend = await producer.send({
      topic: `${topic}-lat`,
      compression: CompressionTypes.GZIP,
      messages: [{ key: 'lat', value: 'one', timestamp: String(T0) }, { key: 'lat', value: 'two', timestamp: String(T0) }]
    })
    const afterAppend = Date.now()
    const auto = sendResults(await autoProducer.send({ topic: `${topic}-auto`, messages: [{ key: 'x', value: 'auto' }] }))
    const autoMetadata = (await admin.fetchTopicMetadata({ topics: [`${topic}-auto`] })).topics
      .map(t => ({ name: t.name, partitions: t.partitions.length }))
    const offsets = await admin.fetchTopicOffsets(topic)
    const at = async (ts) => Object.fromEntries(
      (await admin.fetchTopicOffsetsByTimestamp(topic, ts)).map(o => [o.partition, Number(o.offset)]))
    return {
      sends,
      tooLarge,
      logAppend: logAppend.map(m => ({
        partition: m.partition,
        baseOffset: Number(m.baseOffset),
        logAppendTimeInWindow: Number(m.logAppendTime) >= beforeAppend && Number(m.logAppendTime) <= afterAppend
      })),
      auto,
      autoMetadata,
      offsets: Object.fromEntries(offsets.map(o => [o.partition, { low: Number(o.low), high: Number(o.high) }])),
      offsetsAt: {
        [T0]: await at(T0),
        [T0 + 1500]: await at(T0 + 1500),
        [T0 + 4500]: await at(T0 + 4500),
        [T0 + 6000]: await at(T0 + 6000),
        [T0 + 9000]: await at(T0 + 9000)
      }
    }
  } finally {
    await producer.disconnect()
    await autoProducer.disconnect()
    await admin.disconnect()
  }
})
