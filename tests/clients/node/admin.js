// KafkaJS admin against one broker: createTopics (with configs), fetchTopicMetadata,
// describeConfigs (topic and broker), alterConfigs, describeCluster, deleteTopics.
// Prints what each call answered as one JSON object. Usage: node admin.js BROKER TOPIC BROKER_ID
const { Kafka, ConfigResourceTypes, logLevel } = require('kafkajs')

async function main () {
  const [broker, topic, brokerId] = process.argv.slice(2)
  const kafka = new Kafka({ clientId: 'kafkajs-admin-test', brokers: [broker], logLevel: logLevel.ERROR })
  const admin = kafka.admin()
  await admin.connect()
  const out = {}
  out.created = await admin.createTopics({
    waitForLeaders: true,
    topics: [{ topic, numPartitions: 2, replicationFactor: 1, configEntries: [{ name: 'retention.ms', value: '4321' }] }]
  })
  out.metadata = await admin.fetchTopicMetadata({ topics: [topic] })
  out.describedTopic = await admin.describeConfigs({
    includeSynonyms: true,
    resources: [{ type: ConfigResourceTypes.TOPIC, name: topic }]
  })
  out.altered = await admin.alterConfigs({
    validateOnly: false,
    resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configEntries: [{ name: 'retention.ms', value: '777' }] }]
  })
  out.describedAfter = await admin.describeConfigs({
    includeSynonyms: false,
    resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: ['retention.ms'] }]
  })
  try {
    await admin.alterConfigs({
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configEntries: [{ name: 'no.such.key', value: '1' }] }]
    })
    out.badAlter = 'accepted'
  } catch (e) {
    out.badAlter = e.type || e.name
  }
  out.describedBroker = await admin.describeConfigs({
    includeSynonyms: false,
    resources: [{ type: ConfigResourceTypes.BROKER, name: brokerId, configNames: ['leader.replication.throttled.rate', 'broker.id'] }]
  })
  out.cluster = await admin.describeCluster()
  await admin.deleteTopics({ topics: [topic], timeout: 10000 })
  out.topicsAfterDelete = await admin.listTopics()
  await admin.disconnect()
  process.stdout.write(JSON.stringify(out))
}

main().catch((e) => { console.error(e); process.exit(1) })
