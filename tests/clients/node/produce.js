// Produces the keyed messages read from stdin (one JSON array of [key, value]) with KafkaJS,
// then prints the acknowledged base offsets as JSON. Usage: node produce.js BROKER TOPIC ACKS CODEC
// (KAFKAJS_SSL={"ca":…,"cert":…,"key":…} in the environment: over TLS with a client certificate)
const { Kafka, CompressionTypes, logLevel } = require('kafkajs')

async function main () {
  const [broker, topic, acks, codec] = process.argv.slice(2)
  const input = JSON.parse(require('fs').readFileSync(0, 'utf8'))
  // KAFKAJS_SSL (optional): JSON {ca, cert, key} PEM file paths, for an SSL listener.
  const tls = process.env.KAFKAJS_SSL ? JSON.parse(process.env.KAFKAJS_SSL) : null
  const fs = require('fs')
  const ssl = tls ? { ca: [fs.readFileSync(tls.ca)], cert: fs.readFileSync(tls.cert), key: fs.readFileSync(tls.key) } : false
  const kafka = new Kafka({ clientId: 'kafkajs-test', brokers: [broker], ssl, logLevel: logLevel.ERROR })
  const producer = kafka.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  const compression = codec === 'gzip' ? CompressionTypes.GZIP : CompressionTypes.None
  const acked = []
  const batch = 500
  // Batches of 500 keep each request well under the broker's request size limit.
  for (let i = 0; i < input.length; i += batch) {
    const messages = input.slice(i, i + batch).map(([key, value]) => ({ key, value, partition: 0 }))
    const res = await producer.send({ topic, acks: Number(acks), compression, messages })
    for (const r of res) acked.push([Number(r.baseOffset ?? r.offset), r.errorCode])
  }
  await producer.disconnect()
  process.stdout.write(JSON.stringify(acked))
}

main().catch((e) => { console.error(e); process.exit(1) })
