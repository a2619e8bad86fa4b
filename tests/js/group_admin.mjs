// Group, config and record admin: node group_admin.mjs HOST:PORT TOPIC
// Creates TOPIC (2 partitions, retention.ms=86400000), produces 5 records per partition, consumes
// them in group TOPIC-g, then drives listGroups, describeGroups, fetchOffsets, setOffsets
// (KafkaJS joins the group to commit it: ~8 s of rebalance delay and fetch wait), describeConfigs,
// alterConfigs, deleteTopicRecords and deleteGroups.
import kafkajs from 'kafkajs'
import { bootstrapArg, makeKafka, run } from './common.mjs'

const { ConfigResourceTypes } = kafkajs

const bootstrap = bootstrapArg()
const topic = process.argv[3]
const groupId = `${topic}-g`
const committed = (res) => Object.fromEntries(res[0].partitions.map(p => [p.partition, Number(p.offset)]))
const entries = (res) => Object.fromEntries(res.resources[0].configEntries.map(e =>
  [e.configName, { value: e.configValue, isDefault: e.isDefault, source: e.configSource }]))

run(async () => {
  const kafka = makeKafka(bootstrap, 'kaflet-kafkajs-group-admin')
  const admin = kafka.admin()
  const producer = kafka.producer({ allowAutoTopicCreation: false })
  const consumer = kafka.consumer({ groupId, maxWaitTimeInMs: 200, sessionTimeout: 10000, heartbeatInterval: 1000 })
  await admin.connect()
  const out = {}
  try {
    await admin.createTopics({ topics: [{ topic, numPartitions: 2, configEntries: [{ name: 'retention.ms', value: '86400000' }] }] })
    await producer.connect()
    await producer.send({ topic, messages: Array.from({ length: 10 }, (_, i) => ({ partition: i % 2, value: `v${i}` })) })
    await producer.disconnect()

    await consumer.connect()
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    let got = 0
    let done, fail
    const finished = new Promise((resolve, reject) => { done = resolve; fail = reject })
    consumer.on(consumer.events.CRASH, ({ payload }) => fail(payload.error))
    await consumer.run({ eachMessage: async () => { if (++got === 10) done() } })
    const timer = setTimeout(() => fail(new Error(`consumed ${got} of 10 in 30 s`)), 30000)
    await finished.finally(() => clearTimeout(timer))
    out.consumed = got
    out.listGroups = (await admin.listGroups()).groups.filter(g => g.groupId === groupId)
    const described = (await admin.describeGroups([groupId])).groups[0]
    out.describeGroup = {
      errorCode: described.errorCode,
      state: described.state,
      protocolType: described.protocolType,
      members: described.members.map(m => ({ clientId: m.clientId, clientHost: m.clientHost }))
    }
    await consumer.disconnect()

    out.committed = committed(await admin.fetchOffsets({ groupId, topics: [topic] }))
    await admin.setOffsets({ groupId, topic, partitions: [{ partition: 0, offset: '2' }] })
    out.afterSetOffsets = committed(await admin.fetchOffsets({ groupId, topics: [topic] }))

    const resource = { type: ConfigResourceTypes.TOPIC, name: topic }
    out.configs = entries(await admin.describeConfigs({ resources: [{ ...resource, configNames: ['retention.ms', 'cleanup.policy'] }], includeSynonyms: false }))
    await admin.alterConfigs({ resources: [{ ...resource, configEntries: [{ name: 'retention.ms', value: '3600000' }] }] })
    out.configsAfterAlter = entries(await admin.describeConfigs({ resources: [{ ...resource, configNames: ['retention.ms'] }], includeSynonyms: false }))

    await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: '3' }] })
    out.offsetsAfterDeleteRecords = Object.fromEntries((await admin.fetchTopicOffsets(topic))
      .map(o => [o.partition, { low: Number(o.low), high: Number(o.high) }]))

    out.deleteGroups = (await admin.deleteGroups([groupId])).map(g => ({ groupId: g.groupId, errorCode: g.errorCode }))
    out.listGroupsAfterDelete = (await admin.listGroups()).groups.filter(g => g.groupId === groupId)
    return out
  } finally {
    await consumer.disconnect()
    await producer.disconnect()
    await admin.disconnect()
  }
})
