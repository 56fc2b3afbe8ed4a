import pg from 'pg';
import { connectMqtt, waitConnected } from '../mqtt.js';
import { mqttBackends, mqttUrlFromEnv, pgBackends, pgUrlFromEnv } from './backends.js';

/**
 * Runs once before the suite: checks that every configured real service is
 * reachable (a set variable with a dead service fails the run) and prints
 * which backends the suite uses. In CI both real services are required.
 */
export default async function setup(): Promise<void> {
  const mqttUrl = mqttUrlFromEnv();
  const pgUrl = pgUrlFromEnv();
  if (process.env.CI === 'true' && (!mqttUrl || !pgUrl)) {
    throw new Error('CI=true but TOBIRA_TEST_MQTT_URL or TOBIRA_TEST_PG_URL is unset: the real backends would be skipped');
  }
  if (mqttUrl) {
    const c = connectMqtt(mqttUrl, { reconnectPeriod: 0 });
    try {
      await waitConnected(c, 5000);
    } catch (e) {
      throw new Error(`TOBIRA_TEST_MQTT_URL=${mqttUrl} is unreachable: ${(e as Error).message}`, { cause: e });
    } finally {
      c.end(true);
    }
  }
  if (pgUrl) {
    const c = new pg.Client({ connectionString: pgUrl, connectionTimeoutMillis: 5000 });
    try {
      await c.connect();
      await c.query('SELECT 1');
    } catch (e) {
      throw new Error(`TOBIRA_TEST_PG_URL=${pgUrl} is unreachable: ${(e as Error).message}`, { cause: e });
    } finally {
      await c.end().catch(() => {});
    }
  }
  const line = [
    `MQTT: ${mqttBackends().join(' + ')}${mqttUrl ? ` (mosquitto at ${mqttUrl})` : ' (mosquitto NOT used: TOBIRA_TEST_MQTT_URL unset)'}`,
    `PostgreSQL: ${pgBackends().join(' + ')}${pgUrl ? ` (postgres at ${pgUrl.replace(/\/\/[^@]*@/, '//***@')})` : ' (postgres NOT used: TOBIRA_TEST_PG_URL unset)'}`,
  ];
  process.stdout.write(`\n[tobira] test backends — ${line.join('; ')}\n\n`);
}
