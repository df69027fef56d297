// Produces the keyed messages read from stdin (one JSON array of [key, value]) with KafkaJS over
// SASL_PLAINTEXT, then prints the acknowledged base offsets as JSON.
// Usage: node sasl_produce.js BROKER TOPIC MECHANISM USERNAME PASSWORD  (mechanism: plain, scram-sha-256, scram-sha-512)
// (KAFKAJS_SSL={"ca": <PEM file>} in the environment: SASL_SSL, the broker's certificate checked against that CA)
const { Kafka, logLevel } = require('kafkajs')

async function main () {
  const [broker, topic, mechanism, username, password] = process.argv.slice(2)
  const input = JSON.parse(require('fs').readFileSync(0, 'utf8'))
  const tls = process.env.KAFKAJS_SSL ? JSON.parse(process.env.KAFKAJS_SSL) : null
  const ssl = tls ? { ca: [require('fs').readFileSync(tls.ca)] } : false
  const kafka = new Kafka({
    clientId: 'kafkajs-sasl-test', brokers: [broker], logLevel: logLevel.ERROR, ssl,
    sasl: { mechanism, username, password }, retry: { retries: 2 }
  })
  const producer = kafka.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  const res = await producer.send({ topic, acks: -1, messages: input.map(([key, value]) => ({ key, value, partition: 0 })) })
  await producer.disconnect()
  process.stdout.write(JSON.stringify(res.map((r) => [Number(r.baseOffset ?? r.offset), r.errorCode])))
}

main().catch((e) => { console.error(e.type || '', e.message); process.exit(1) })
