/**
 * One real gateway in a process of its own, so the bench's clients do not
 * share its event loop: `TOBIRA_BENCH_GATEWAY_CONFIG` holds the config
 * (the same object `parseConfig` reads from the daemon's file). Tells its
 * parent 'ready' over IPC once started; stops on 'stop'.
 */
import { pino } from 'pino';
import { createGateway, parseConfig } from '@tobira/gateway';

const raw = process.env.TOBIRA_BENCH_GATEWAY_CONFIG;
if (raw === undefined) throw new Error('TOBIRA_BENCH_GATEWAY_CONFIG is not set');
const gw = createGateway(parseConfig(JSON.parse(raw)), { log: pino({ level: 'silent' }) });
await gw.start();
process.send?.('ready');
process.on('message', (m) => {
  if (m !== 'stop') return;
  void gw.stop({ force: true }).then(() => process.exit(0));
});
