// kpress's KafkaJS test consumer, driven by tests/harness/kafkajs.rs. KafkaJS as
// installed by scripts/setup.sh has no codec plug-ins: it reads gzip and uncompressed
// batches only.
//
//   kafkajs_client.js consume --bootstrap B --topic T [--topic T2]... --count N
//       [--isolation read_committed|read_uncommitted] [--group-id G]
//       [--timeout-ms N] [--output F] [--property client.id=ID]...
//     reads every partition of each topic from the beginning (in a group of its own
//     unless --group-id names one, offsets never committed); writes
//     "topic TAB partition TAB offset TAB hex(value)" per record (offset order within a
//     partition, partitions sorted) and prints "consumed COUNT sha256=HEX". A consumer
//     that crashes for good (KafkaJS restarts after retriable errors) prints
//     "consumer crashed: NAME: MESSAGE" to stderr and exits 1.
//
// The checksum is SHA-256 over each value as a 4-byte big-endian length and the bytes,
// as the other test clients compute it.
'use strict'

const crypto = require('crypto')
const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

function parseArgs(argv) {
  const [command, ...rest] = argv
  const args = { command, topic: [], property: [], isolation: 'read_uncommitted', timeoutMs: 60000 }
  for (let i = 0; i < rest.length; i += 2) {
    const [flag, value] = [rest[i], rest[i + 1]]
    if (value === undefined) fail(`${flag} wants a value`)
    switch (flag) {
      case '--bootstrap': args.bootstrap = value; break
      case '--topic': args.topic.push(value); break
      case '--count': args.count = Number(value); break
      case '--isolation': args.isolation = value; break
      case '--group-id': args.groupId = value; break
      case '--timeout-ms': args.timeoutMs = Number(value); break
      case '--output': args.output = value; break
      case '--property': args.property.push(value); break
      default: fail(`unknown argument ${flag}`)
    }
  }
  if (command !== 'consume') fail(`unknown command ${command} (only consume)`)
  if (!args.bootstrap || args.topic.length === 0 || !Number.isInteger(args.count)) {
    fail('consume wants --bootstrap, --topic and --count')
  }
  return args
}

function fail(message) {
  process.stderr.write(`${message}\n`)
  process.exit(2)
}

function properties(pairs) {
  const out = {}
  for (const kv of pairs) {
    const at = kv.indexOf('=')
    if (at <= 0) fail(`--property wants k=v, got: ${kv}`)
    out[kv.slice(0, at)] = kv.slice(at + 1)
  }
  for (const key of Object.keys(out)) {
    if (key !== 'client.id') fail(`unsupported property ${key} (only client.id)`)
  }
  return out
}

function checksum(values) {
  const sha = crypto.createHash('sha256')
  const length = Buffer.alloc(4)
  for (const v of values) {
    length.writeUInt32BE(v.length)
    sha.update(length)
    sha.update(v)
  }
  return sha.digest('hex')
}

// KafkaJS's own errors, one line each on stderr, so the test can show why a read failed.
const logCreator = () => ({ namespace, log }) => {
  const extra = log.error ? `: ${log.error}` : ''
  process.stderr.write(`[kafkajs ${namespace}] ${log.message}${extra}\n`)
}

async function consume(args) {
  const props = properties(args.property)
  const kafka = new Kafka({
    clientId: props['client.id'] || 'kpress-tests-kafkajs',
    brokers: [args.bootstrap],
    logLevel: logLevel.ERROR,
    logCreator,
    retry: { retries: 3 },
  })
  const consumer = kafka.consumer({
    groupId: args.groupId || `kpress-tests-kafkajs-${process.pid}-${Date.now()}`,
    readUncommitted: args.isolation !== 'read_committed',
  })
  const received = new Map()
  let count = 0
  let crashed = null
  let done
  const finished = new Promise(resolve => { done = resolve })
  // KafkaJS restarts after a retriable error (a group coordinator still loading on a
  // new broker); any other (an undecodable batch) ends the read.
  consumer.on(consumer.events.CRASH, event => {
    if (event.payload.restart) return
    crashed = event.payload.error
    done()
  })
  const deadline = setTimeout(done, args.timeoutMs)

  await consumer.connect()
  await consumer.subscribe({ topics: args.topic, fromBeginning: true })
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ topic, partition, message }) => {
      const key = `${topic}\t${partition}`
      if (!received.has(key)) received.set(key, [])
      received.get(key).push([message.offset, message.value || Buffer.alloc(0)])
      count += 1
      if (count >= args.count) done()
    },
  })
  await finished
  clearTimeout(deadline)
  await consumer.disconnect()

  const lines = []
  const values = []
  const byTopicPartition = (a, b) => {
    const [ta, pa] = a.split('\t')
    const [tb, pb] = b.split('\t')
    return ta < tb ? -1 : ta > tb ? 1 : Number(pa) - Number(pb)
  }
  for (const key of [...received.keys()].sort(byTopicPartition)) {
    for (const [offset, value] of received.get(key)) {
      values.push(value)
      lines.push(`${key}\t${offset}\t${value.toString('hex')}\n`)
    }
  }
  if (args.output) fs.writeFileSync(args.output, lines.join(''))
  else process.stdout.write(lines.join(''))
  process.stdout.write(`consumed ${count} sha256=${checksum(values)}\n`)
  if (crashed) {
    process.stderr.write(`consumer crashed: ${crashed.name}: ${crashed.message}\n`)
    process.exit(1)
  }
  if (count !== args.count) {
    process.stderr.write(`expected ${args.count} records, consumed ${count}\n`)
    process.exit(1)
  }
}

consume(parseArgs(process.argv.slice(2))).catch(e => {
  process.stderr.write(`consumer failed: ${e.name}: ${e.message}\n`)
  process.exit(1)
})
