// One KafkaJS group member: subscribes to TOPIC from the beginning in GROUP, prints each value
// as "partition offset value" lines, commits as KafkaJS does (after each batch), and on SIGTERM
// disconnects (commits, leaves the group) and exits. Usage: node group_consume.js BROKERS TOPIC GROUP
const { Kafka, logLevel } = require('kafkajs')

async function main () {
  const [brokers, topic, groupId] = process.argv.slice(2)
  const kafka = new Kafka({ clientId: 'kafkajs-group-test', brokers: brokers.split(','), logLevel: logLevel.ERROR })
  const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 1000 })
  let stopping = false
  const stop = async () => {
    if (stopping) return
    stopping = true
    await consumer.disconnect()
    process.exit(0)
  }
  process.on('SIGTERM', stop)
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  await consumer.run({
    eachBatch: async ({ batch, resolveOffset, heartbeat, commitOffsetsIfNecessary }) => {
      const lines = batch.messages.map((m) => `${batch.partition} ${m.offset} ${m.value.toString()}`)
      if (lines.length) process.stdout.write(lines.join('\n') + '\n')
      for (const m of batch.messages) resolveOffset(m.offset)
      await commitOffsetsIfNecessary()
      await heartbeat()
    }
  })
}

main().catch((e) => { console.error(e); process.exit(1) })
