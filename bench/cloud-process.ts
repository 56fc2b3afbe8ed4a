/**
 * One real cloud (core + admin API) in a process of its own, like a
 * deployed replica: `TOBIRA_BENCH_CLOUD_ENV` holds its environment (what
 * `parseConfig` reads), `TOBIRA_BENCH_ADMIN_TOKEN` the bootstrap admin
 * token. Tells its parent `{ ready, url }` over IPC once listening; stops on
 * 'stop'. The API's rate limits are lifted: the bench measures the path, not
 * the flood guard.
 */
import { pino } from 'pino';
import { systemClock } from '@tobira/shared';
import { createCloud, parseConfig, startAdminApi } from '@tobira/cloud';

const raw = process.env.TOBIRA_BENCH_CLOUD_ENV;
const token = process.env.TOBIRA_BENCH_ADMIN_TOKEN;
if (raw === undefined || token === undefined) throw new Error('TOBIRA_BENCH_CLOUD_ENV and TOBIRA_BENCH_ADMIN_TOKEN must be set');
const env: unknown = JSON.parse(raw);
if (typeof env !== 'object' || env === null) throw new Error('TOBIRA_BENCH_CLOUD_ENV is not an object');
const log = pino({ level: process.env.TOBIRA_BENCH_LOG ?? 'silent' });
const cloud = createCloud(parseConfig(Object.fromEntries(Object.entries(env).map(([k, v]) => [k, String(v)]))), {
  log,
  clock: systemClock,
});
await cloud.start();
const api = await startAdminApi({
  cloud,
  db: cloud.db,
  log,
  clock: systemClock,
  host: '127.0.0.1',
  port: 0,
  bootstrapAdminToken: token,
  config: { rateLimitMax: 1_000_000_000, rateLimitIpMax: 1_000_000_000 },
  webhooks: false,
  telemetry: cloud.telemetry,
  processRegistry: cloud.metricsRegistry,
});
process.send?.({ ready: true, url: api.url });
process.on('message', (m) => {
  if (m !== 'stop') return;
  void api
    .close()
    .then(() => cloud.stop())
    .then(() => process.exit(0));
});
