import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { startEmbeddedBroker } from '../broker.js';

/**
 * Test backends. The suite always runs against the embedded parts (aedes,
 * PGlite) and also against real Mosquitto and PostgreSQL when
 * TOBIRA_TEST_MQTT_URL / TOBIRA_TEST_PG_URL are set (CI sets both). Tests
 * iterate over `mqttBackends()` / `pgBackends()` with `describe.each`, so a
 * missing service shows as a missing backend in the printed summary, never as
 * a silent skip.
 */
export type MqttBackendName = 'aedes' | 'mosquitto';
export type PgBackendName = 'pglite' | 'postgres';

export const mqttUrlFromEnv = (): string | undefined => process.env.TOBIRA_TEST_MQTT_URL || undefined;
export const pgUrlFromEnv = (): string | undefined => process.env.TOBIRA_TEST_PG_URL || undefined;

export function mqttBackends(): MqttBackendName[] {
  return mqttUrlFromEnv() ? ['aedes', 'mosquitto'] : ['aedes'];
}
export function pgBackends(): PgBackendName[] {
  return pgUrlFromEnv() ? ['pglite', 'postgres'] : ['pglite'];
}

export interface MqttTestBroker {
  readonly backend: MqttBackendName;
  readonly url: string;
  /** A topic prefix unique to this test run, for brokers shared between tests (Mosquitto). */
  readonly unique: string;
  stop(): Promise<void>;
}

export async function startMqttBackend(backend: MqttBackendName): Promise<MqttTestBroker> {
  const unique = randomBytes(4).toString('hex');
  if (backend === 'aedes') {
    const b = await startEmbeddedBroker();
    return { backend, url: b.url, unique, stop: () => b.stop() };
  }
  const url = mqttUrlFromEnv();
  if (!url) throw new Error('TOBIRA_TEST_MQTT_URL is not set');
  return { backend, url, unique, stop: async () => {} };
}

/** A database of its own for one test: a fresh in-memory PGlite, or a fresh PostgreSQL database dropped afterwards. */
export type TestDatabase =
  | { readonly backend: 'pglite'; readonly dataDir: string; drop(): Promise<void> }
  | { readonly backend: 'postgres'; readonly url: string; drop(): Promise<void> };

export async function createTestDatabase(backend: PgBackendName): Promise<TestDatabase> {
  if (backend === 'pglite') return { backend, dataDir: 'memory://', drop: async () => {} };
  const adminUrl = pgUrlFromEnv();
  if (!adminUrl) throw new Error('TOBIRA_TEST_PG_URL is not set');
  const name = `tobira_t_${Date.now().toString(36)}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return {
    backend,
    url: url.toString(),
    async drop() {
      const c = new pg.Client({ connectionString: adminUrl });
      await c.connect();
      try {
        await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await c.end();
      }
    },
  };
}
