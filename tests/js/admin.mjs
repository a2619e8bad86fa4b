// Admin API round trip: node admin.mjs HOST:PORT PREFIX
// Prints one JSON object; every KafkaJS error that is expected is captured as its `type`.
import { bootstrapArg, makeKafka, run } from './common.mjs'

const bootstrap = bootstrapArg()
const prefix = process.argv[3] || `kjs-admin-${Date.now()}`

const summary = (md) => md.topics.map(t => ({
  name: t.name,
  partitions: t.partitions
    .map(p => ({ id: p.partitionId, error: p.partitionErrorCode, leader: p.leader, replicas: p.replicas, isr: p.isr }))
    .sort((a, b) => a.id - b.id)
}))

async function errorType (promise) {
  try {
    await promise
    return null
  } catch (e) {
    // Retriable errors surface as KafkaJSNumberOfRetriesExceeded wrapping the broker's error.
    const cause = e.cause || e.originalError || e
    // A per-topic CreateTopics failure arrives as a KafkaJSAggregateError of protocol errors.
    if (cause.errors) return cause.errors.map(x => x.type || x.name).join(',')
    return cause.type || cause.name
  }
}

run(async () => {
  const kafka = makeKafka(bootstrap, 'kaflet-kafkajs-admin')
  const admin = kafka.admin()
  await admin.connect()
  const a = `${prefix}-a`
  const b = `${prefix}-b`
  const out = {}
  try {
    out.created = await admin.createTopics({
      topics: [
        { topic: a, numPartitions: 3, replicationFactor: 1 },
        { topic: b, numPartitions: 1, configEntries: [{ name: 'retention.ms', value: '86400000' }] }
      ],
      waitForLeaders: true
    })
    out.createdAgain = await admin.createTopics({ topics: [{ topic: a, numPartitions: 3 }] })
    out.validateOnly = await admin.createTopics({ topics: [{ topic: `${prefix}-v`, numPartitions: 2 }], validateOnly: true, waitForLeaders: false })
    out.createErrors = {
      replicationFactor3: await errorType(admin.createTopics({ topics: [{ topic: `${prefix}-rf3`, replicationFactor: 3 }] })),
      unknownConfig: await errorType(admin.createTopics({ topics: [{ topic: `${prefix}-cfg`, configEntries: [{ name: 'no.such.config', value: '1' }] }] })),
      invalidName: await errorType(admin.createTopics({ topics: [{ topic: `${prefix} bad name!` }] })),
      zeroPartitions: await errorType(admin.createTopics({ topics: [{ topic: `${prefix}-zero`, numPartitions: 0 }] }))
    }
    // KafkaJS's defaults are numPartitions -1 and replicationFactor -1 ("broker default"), even at CreateTopics v3.
    out.createdWithDefaults = await admin.createTopics({ topics: [{ topic: `${prefix}-defaults` }] })
    out.defaultsMetadata = summary(await admin.fetchTopicMetadata({ topics: [`${prefix}-defaults`] }))
    await admin.deleteTopics({ topics: [`${prefix}-defaults`], timeout: 10000 })
    out.cluster = await admin.describeCluster()
    out.listed = (await admin.listTopics()).filter(t => t.startsWith(prefix)).sort()
    out.metadata = summary(await admin.fetchTopicMetadata({ topics: [a, b] }))
    out.allMetadataNames = summary(await admin.fetchTopicMetadata()).map(t => t.name).filter(t => t.startsWith(prefix)).sort()
    out.unknownMetadataError = await errorType(admin.fetchTopicMetadata({ topics: [`${prefix}-missing`] }))

    await admin.createPartitions({ topicPartitions: [{ topic: a, count: 5 }] })
    out.afterCreatePartitions = summary(await admin.fetchTopicMetadata({ topics: [a] }))
    out.shrinkError = await errorType(admin.createPartitions({ topicPartitions: [{ topic: a, count: 2 }] }))

    out.offsets = await admin.fetchTopicOffsets(a)
    out.offsetsByTimestamp = await admin.fetchTopicOffsetsByTimestamp(a, Date.now() - 3600_000)

    await admin.deleteTopics({ topics: [b], timeout: 10000 })
    out.listedAfterDelete = (await admin.listTopics()).filter(t => t.startsWith(prefix)).sort()
    out.deleteUnknownError = await errorType(admin.deleteTopics({ topics: [`${prefix}-missing`], timeout: 10000 }))
    return out
  } finally {
    await admin.disconnect()
  }
})
