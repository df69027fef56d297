// Produces records with headers and timestamps read from stdin with KafkaJS, in batches of 500,
// then prints the acknowledged [base offset, error code] pairs as JSON.
// stdin: one JSON array of [key, value, [[header key, header value in base64], ...], timestamp ms].
// Usage: node produce_headers.js BROKERS TOPIC ACKS CODEC
const { Kafka, CompressionTypes, logLevel } = require('kafkajs')

async function main () {
  const [brokers, topic, acks, codec] = process.argv.slice(2)
  const input = JSON.parse(require('fs').readFileSync(0, 'utf8'))
  const kafka = new Kafka({ clientId: 'kafkajs-headers', brokers: brokers.split(','), logLevel: logLevel.ERROR })
  const producer = kafka.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  const compression = codec === 'gzip' ? CompressionTypes.GZIP : CompressionTypes.None
  const acked = []
  const batch = 500
  for (let i = 0; i < input.length; i += batch) {
    const messages = input.slice(i, i + batch).map(([key, value, headers, timestamp]) => ({
      key,
      value,
      partition: 0,
      timestamp: String(timestamp),
      headers: Object.fromEntries(headers.map(([k, v]) => [k, Buffer.from(v, 'base64')]))
    }))
    const res = await producer.send({ topic, acks: Number(acks), compression, messages })
    for (const r of res) acked.push([Number(r.baseOffset ?? r.offset), r.errorCode])
  }
  await producer.disconnect()
  process.stdout.write(JSON.stringify(acked))
}

main().catch((e) => { console.error(e); process.exit(1) })
