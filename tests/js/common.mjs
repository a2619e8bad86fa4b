// Shared helpers for the KafkaJS scripts: one client per run, JSON out, non-zero exit on failure.
import { Kafka, logLevel } from 'kafkajs'

export function bootstrapArg () {
  const bootstrap = process.argv[2]
  if (!bootstrap) {
    console.error(`usage: node ${process.argv[1]} HOST:PORT [args...]`)
    process.exit(2)
  }
  return bootstrap
}

// KAFKAJS_LOG=debug|info|warn|error|nothing (default: error) -- logs go to stderr.
export function makeKafka (bootstrap, clientId) {
  const level = logLevel[(process.env.KAFKAJS_LOG || 'error').toUpperCase()] ?? logLevel.ERROR
  return new Kafka({
    clientId,
    brokers: [bootstrap],
    logLevel: level,
    logCreator: () => ({ namespace, level: l, label, log }) => {
      const { message, ...extra } = log
      process.stderr.write(`[${label}] ${namespace}: ${message} ${JSON.stringify(extra)}\n`)
    },
    connectionTimeout: 5000,
    requestTimeout: 15000,
    retry: { retries: 3, initialRetryTime: 100 }
  })
}

// Run `main`, print its result as one JSON line on stdout; on error print it and exit 1.
export async function run (main) {
  try {
    const result = await main()
    process.stdout.write(JSON.stringify(result) + '\n')
    process.exit(0)
  } catch (e) {
    process.stderr.write(`FAILED: ${e && e.stack ? e.stack : e}\n`)
    if (e && e.type) process.stderr.write(`kafka error type: ${e.type}\n`)
    process.exit(1)
  }
}
