import { ManualClock, createLogger, generateSigningKeyPair, newId, type Logger } from '@tobira/shared';
import { createTestDatabase, type PgBackendName } from '@tobira/shared/testing';
import type { Db } from '../src/adapters/db/db.js';
import { migrate } from '../src/adapters/db/migrate.js';
import { openDb } from '../src/adapters/db/open.js';
import { noCrash, type CrashHook } from '../src/app/crash.js';
import { unmanagedBrokerAccounts } from '../src/app/broker-accounts.js';
import type { AppDeps } from '../src/app/deps.js';
import { parseConfig } from '../src/config.js';
import { loadSecretBox, type SecretBox } from '../src/adapters/kek.js';
import { createPerson, createSite, createDoor, registerGateway } from '../src/app/registry.js';

export const T0 = Date.UTC(2026, 10, 29, 9, 0, 0);

/** The KEK of every test cloud (TOBIRA_KEK): fixed, so clouds restarted on the same database open what earlier ones sealed. */
export const TEST_KEK = Buffer.alloc(32, 0x5e).toString('base64');
/** The secret box of TEST_KEK, for use cases and workers a test wires itself. */
export const testSecrets: SecretBox = loadSecretBox(parseConfig({ TOBIRA_KEK: TEST_KEK }));
export const HOUR = 3_600_000;
export const DAY = 24 * HOUR;

export const testLog: Logger = createLogger('cloud-test');

export interface TestDb {
  readonly db: Db;
  /** Connection options a second cloud instance would use for the same database. */
  readonly databaseUrl: string | undefined;
  close(): Promise<void>;
}

/** A migrated database of its own: fresh PGlite in memory, or a fresh PostgreSQL database dropped on close. */
export async function openTestDb(backend: PgBackendName): Promise<TestDb> {
  const t = await createTestDatabase(backend);
  const databaseUrl = t.backend === 'postgres' ? t.url : undefined;
  const db = await openDb({ databaseUrl, pgliteDataDir: t.backend === 'pglite' ? t.dataDir : 'memory://' }, testLog);
  await migrate(db, testLog, T0);
  return {
    db,
    databaseUrl,
    async close() {
      await db.close();
      await t.drop();
    },
  };
}

export function deps(
  db: Db,
  clock = new ManualClock(T0),
  opts: { crash?: CrashHook; wake?: () => void } = {},
): AppDeps & { clock: ManualClock } {
  return {
    db,
    clock,
    log: testLog,
    crash: opts.crash ?? noCrash,
    wake: opts.wake ?? (() => {}),
    brokerAccounts: unmanagedBrokerAccounts,
    secrets: testSecrets,
  };
}

/** A site, a gateway with two doors and a person, under fresh ids (tests share one database and isolate by id). */
export async function seed(d: AppDeps, opts: { gatewayId?: string } = {}) {
  const u = newId().slice(-12);
  const gatewayId = opts.gatewayId ?? `gw-${u}`;
  const pair = await generateSigningKeyPair();
  const site = await createSite(d, { id: `site-${u}`, name: 'Site' });
  if (site.status !== 'applied') throw new Error('seed site');
  const gw = await registerGateway(
    d,
    { issuer: 'tobira-cloud', jwks: { keys: [] } },
    { gatewayId, siteId: site.state.id, publicJwk: pair.publicJwk },
  );
  if (gw.status !== 'applied') throw new Error(`seed gateway: ${gw.code}`);
  const d1 = await createDoor(d, { id: `door-a-${u}`, gatewayId, name: 'A' });
  const d2 = await createDoor(d, { id: `door-b-${u}`, gatewayId, name: 'B' });
  const p = await createPerson(d, { id: `person-${u}`, name: 'Hana' });
  if (d1.status !== 'applied' || d2.status !== 'applied' || p.status !== 'applied') throw new Error('seed');
  return {
    u,
    gatewayId,
    pair,
    provisioning: gw.state,
    siteId: site.state.id,
    doorA: d1.state.id,
    doorB: d2.state.id,
    personId: p.state.id,
  };
}

export { parseConfig };

/** A logger whose JSON lines a test can read back. */
export async function capturingLogger(): Promise<{ log: Logger; lines: Record<string, unknown>[] }> {
  const { pino } = await import('pino');
  const lines: Record<string, unknown>[] = [];
  const log = pino({ level: 'debug' }, { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) });
  return { log, lines };
}
