/**
 * `npm run bench:decision [-- --seconds N]`: only the door decision scenario of
 * `npm run bench` (raw MQTT floor, then the decision at 500/s and at a few
 * higher rates), printed as JSON, for before/after comparisons of the
 * gateway's hot path without the 20-minute full run. Not a test: asserts nothing.
 */
import { loadavg } from 'node:os';
import { startDecisionBench } from './decision.js';
import { rawMqttRtt } from './floors.js';
import { startBroker } from './mosquitto.js';

const secondsArg = process.argv.indexOf('--seconds');
const SECONDS = secondsArg >= 0 ? Number(process.argv[secondsArg + 1]) : 10;
const RATES = [500, 2000, 3000];

async function main() {
  const broker = await startBroker();
  const out: Record<string, unknown> = { load1Before: loadavg()[0] };
  try {
    out.rawMqtt = await rawMqttRtt(broker.url, 2000);
    const bench = await startDecisionBench(broker.url, 20);
    try {
      await bench.run({ rate: 500, seconds: 2 });
      for (const rate of RATES) out[`rate${rate}`] = await bench.run({ rate, seconds: SECONDS });
    } finally {
      await bench.stop();
    }
  } finally {
    await broker.stop();
  }
  out.load1After = loadavg()[0];
  console.log(JSON.stringify(out));
}
await main();
