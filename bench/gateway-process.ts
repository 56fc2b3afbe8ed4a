/**
 * Real gateways in a process of their own, so the bench's clients do not
 * share their event loop: `TOBIRA_BENCH_GATEWAY_CONFIG` holds one config (the
 * same object `parseConfig` reads from the daemon's file) or an array of
 * them (the fleet runs several gateways per process, each with its own
 * SQLite file and MQTT connections). Tells its parent 'ready' over IPC once
 * all are started; answers 'rss' with `{ rss }` (bytes); stops on 'stop'.
 */
import { pino } from 'pino';
import { createGateway, parseConfig } from '@tobira/gateway';

const raw = process.env.TOBIRA_BENCH_GATEWAY_CONFIG;
if (raw === undefined) throw new Error('TOBIRA_BENCH_GATEWAY_CONFIG is not set');
const parsed: unknown = JSON.parse(raw);
const configs: unknown[] = Array.isArray(parsed) ? parsed : [parsed];
const log = pino({ level: process.env.TOBIRA_BENCH_LOG ?? 'silent' });
const gateways = configs.map((c) => createGateway(parseConfig(c), { log }));
for (const gw of gateways) await gw.start();
process.send?.('ready');
process.on('message', (m) => {
  if (m === 'rss') process.send?.({ rss: process.memoryUsage().rss });
  if (m !== 'stop') return;
  void Promise.all(gateways.map((gw) => gw.stop({ force: true }))).then(() => process.exit(0));
});
