import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ManualClock } from '@tobira/shared';
import { pgBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { runAdminCli } from '../src/admin-cli.js';
import type { Queryable } from '../src/adapters/db/db.js';
import { issueTargets } from '../src/adapters/db/keys.js';
import { SEALED_SECRETS } from '../src/adapters/db/sealed-secrets.js';
import { SecretUnreadable, loadSecretBox, type SecretBox } from '../src/adapters/kek.js';
import { createWebhook } from '../src/adapters/webhooks/endpoints.js';
import { WebhookDispatcher } from '../src/adapters/webhooks/worker.js';
import { signWebhook } from '../src/adapters/webhooks/deliver.js';
import { ConfigError, derivedKid, parseConfig } from '../src/config.js';
import { startCloud } from './cloud-helpers.js';
import { T0, TEST_KEK, deps, openTestDb, seed, testLog, testSecrets, type TestDb } from './helpers.js';

/**
 * Secrets at rest (docs/security.md "Secrets at rest"): credential peppers and
 * webhook signing secrets are stored sealed with the KEK, bound to their row,
 * and re-encrypted under a new KEK by `secrets rotate`.
 */
const OLD = randomBytes(32).toString('base64');
const NEW = randomBytes(32).toString('base64');
/** Each test migrates a database of its own (PGlite on a shared machine is slow at it). */
const DB_TEST_MS = 180_000;
const ring = (v: string): SecretBox => loadSecretBox(parseConfig({ TOBIRA_KEKS: v }));
const oldOnly = ring(`old:${OLD}`);
const both = ring(`new:${NEW},old:${OLD}`);
const newOnly = ring(`new:${NEW}`);

/** Every row of every table, as text: what a dump of the database holds. */
async function dump(db: Queryable): Promise<string> {
  const tables = await db.query<{ t: string }>(
    "SELECT table_name AS t FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY 1",
  );
  const out: string[] = [];
  for (const { t } of tables.rows) {
    const r = await db.query<{ row: string }>(`SELECT x::text AS row FROM "${t}" x`);
    out.push(...r.rows.map((x) => `${t}: ${x.row}`));
  }
  return out.join('\n');
}

/** A gateway (through registration, so its pepper is sealed by the verb) with a door, and a webhook endpoint at its site. */
async function secretsUnder(db: TestDb['db'], box: SecretBox, url = 'https://hooks.example.com/t') {
  const d = { ...deps(db), secrets: box };
  const s = await seed(d);
  const webhook = await createWebhook(db, box, { siteId: s.siteId, url, events: ['alarm'] }, T0);
  return { ...s, pepper: s.provisioning.credentialPepper, webhookId: webhook.id, webhookSecret: webhook.secret };
}

const pepperOf = async (db: Queryable, box: SecretBox, s: { personId: string; doorA: string }): Promise<string> =>
  (await issueTargets(db, box, null, s.personId, [s.doorA])).doors[0]?.pepper ?? 'none';

const unreadable = async (p: Promise<unknown>): Promise<string> => {
  try {
    await p;
    return 'opened';
  } catch (e) {
    if (e instanceof SecretUnreadable) return e.code;
    throw e;
  }
};

describe('the KEK configuration', () => {
  const refusal = (f: () => unknown): ConfigError => {
    try {
      f();
    } catch (e) {
      if (e instanceof ConfigError) return e;
      throw e;
    }
    throw new Error('not refused');
  };

  it('no KEK: nothing to seal with, KEK_REQUIRED (there is no default)', () => {
    expect(parseConfig({}).keks).toBeUndefined();
    expect(refusal(() => loadSecretBox(parseConfig({})))).toMatchObject({ code: 'KEK_REQUIRED', variable: 'TOBIRA_KEK' });
  });

  it('a key that is not 32 bytes, a malformed or duplicate ring entry, or both variables: KEK_INVALID, the value never in the message', () => {
    const short = Buffer.alloc(31, 1).toString('base64');
    for (const env of [
      { TOBIRA_KEK: short },
      { TOBIRA_KEK: 'not base64 at all!' },
      { TOBIRA_KEKS: OLD },
      { TOBIRA_KEKS: `a:${OLD},a:${NEW}` },
      { TOBIRA_KEKS: `bad kid:${OLD}` },
      { TOBIRA_KEK: OLD, TOBIRA_KEKS: `a:${NEW}` },
    ]) {
      const e = refusal(() => parseConfig(env));
      expect(e.code, JSON.stringify(Object.keys(env))).toBe('KEK_INVALID');
      expect(e.message).not.toContain(OLD);
      expect(e.message).not.toContain(short);
    }
  });

  it('TOBIRA_KEK goes by a key id derived from the key, so replicas given it agree; a ring seals with its first key', () => {
    const c = parseConfig({ TOBIRA_KEK: TEST_KEK });
    expect(c.keks?.variable).toBe('TOBIRA_KEK');
    expect(c.keks?.ring.map((k) => k.kid)).toEqual([derivedKid(Buffer.from(TEST_KEK, 'base64'))]);
    expect(both.currentKid).toBe('new');
    expect(both.kids).toEqual(['new', 'old']);
  });

  it('secrets new-kek prints a fresh 32-byte key as a TOBIRA_KEKS entry whose kid is the one TOBIRA_KEK derives', async () => {
    const made = async () => {
      const out: string[] = [];
      expect(await runAdminCli(['secrets', 'new-kek'], { env: {}, out: (x) => out.push(x), err: () => {} })).toBe(0);
      return JSON.parse(out.join('\n')) as { kid: string; key: string; entry: string };
    };
    const k = await made();
    expect(parseConfig({ TOBIRA_KEKS: k.entry }).keks?.ring).toEqual(parseConfig({ TOBIRA_KEK: k.key }).keks?.ring);
    expect((await made()).key).not.toBe(k.key);
  });

  it('a sealed value opens with its key and row only: another row, another key id, another key of the same id, a flipped bit all fail', () => {
    const sealed = both.seal('pepper-1', 'gateways.credential_pepper:gw-1');
    expect(sealed).toMatch(/^kek1:new:/);
    expect(sealed).not.toContain('pepper-1');
    expect(both.seal('pepper-1', 'gateways.credential_pepper:gw-1')).not.toBe(sealed); // a fresh nonce each time
    expect(both.open(sealed, 'gateways.credential_pepper:gw-1')).toMatchObject({ ok: true, value: 'pepper-1', kid: 'new' });
    expect(both.open(sealed, 'gateways.credential_pepper:gw-2')).toMatchObject({ ok: false, code: 'SECRET_UNREADABLE' });
    expect(both.open(sealed, 'webhook_endpoints.secret:gw-1')).toMatchObject({ ok: false, code: 'SECRET_UNREADABLE' });
    expect(both.open(sealed.replace('kek1:new:', 'kek1:old:'), 'gateways.credential_pepper:gw-1')).toMatchObject({
      ok: false,
      code: 'SECRET_UNREADABLE',
    });
    expect(oldOnly.open(sealed, 'gateways.credential_pepper:gw-1')).toMatchObject({ ok: false, code: 'KEK_UNKNOWN', kid: 'new' });
    expect(ring(`new:${OLD}`).open(sealed, 'gateways.credential_pepper:gw-1')).toMatchObject({ ok: false, code: 'SECRET_UNREADABLE' });
    const parts = sealed.split(':');
    const data = Buffer.from(parts[3] ?? '', 'base64url');
    data[0] = (data[0] ?? 0) ^ 1;
    parts[3] = data.toString('base64url');
    expect(both.open(parts.join(':'), 'gateways.credential_pepper:gw-1')).toMatchObject({ ok: false, code: 'SECRET_UNREADABLE' });
  });
});

describe.each(pgBackends())('secrets at rest on %s', (backend) => {
  let t: TestDb;
  afterEach(async () => {
    await t?.close();
  });

  it(
    'a dump of the database holds no credential pepper and no webhook secret, yet the cloud reads both back',
    { timeout: DB_TEST_MS },
    async () => {
      t = await openTestDb(backend);
      const s = await secretsUnder(t.db, testSecrets);
      const text = await dump(t.db);
      expect(text).toContain(s.gatewayId);
      expect(text).not.toContain(s.pepper);
      expect(text).not.toContain(s.webhookSecret);
      const g = await t.db.query<{ credential_pepper: string | null; credential_pepper_sealed: string }>(
        'SELECT credential_pepper, credential_pepper_sealed FROM gateways WHERE id = $1',
        [s.gatewayId],
      );
      expect(g.rows[0]).toMatchObject({ credential_pepper: null, credential_pepper_sealed: expect.stringMatching(/^kek1:k/) });
      expect(await pepperOf(t.db, testSecrets, s)).toBe(s.pepper);
    },
  );

  it(
    'a ciphertext copied to another row does not open there: the issue refuses to use it, the webhook is not sent and is logged WEBHOOK_SECRET_UNREADABLE',
    { timeout: DB_TEST_MS },
    async () => {
      t = await openTestDb(backend);
      const received: string[] = [];
      const server: Server = createServer((req, res) => {
        received.push(String(req.headers['tobira-signature']));
        res.writeHead(204).end();
      });
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      try {
        const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
        const a = await secretsUnder(t.db, testSecrets, url);
        const b = await secretsUnder(t.db, testSecrets, url);
        await t.db.query(
          'UPDATE gateways SET credential_pepper_sealed = (SELECT credential_pepper_sealed FROM gateways WHERE id = $1) WHERE id = $2',
          [a.gatewayId, b.gatewayId],
        );
        await t.db.query(
          'UPDATE webhook_endpoints SET secret_sealed = (SELECT secret_sealed FROM webhook_endpoints WHERE id = $1) WHERE id = $2',
          [a.webhookId, b.webhookId],
        );
        expect(await pepperOf(t.db, testSecrets, a)).toBe(a.pepper);
        expect(await unreadable(pepperOf(t.db, testSecrets, b))).toBe('SECRET_UNREADABLE');

        for (const id of [a.webhookId, b.webhookId])
          await t.db.query(
            `INSERT INTO webhook_outbox (endpoint_id, type, body, next_attempt_at, created_at) VALUES ($1, 'alarm', '{}'::jsonb, $2, $2)`,
            [id, T0],
          );
        const clock = new ManualClock(T0);
        const worker = new WebhookDispatcher(
          { db: t.db, secrets: testSecrets, clock, log: testLog, random: () => 1 },
          { allowPrivateNetworks: true, baseMs: 1000 },
        );
        expect(await worker.runOnce()).toBe(2);
        // only a's delivery went out, signed with a's secret
        expect(received).toHaveLength(1);
        expect(received[0]).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/);
        const codes = await t.db.query<{ endpoint_id: string; code: string | null }>(
          'SELECT endpoint_id, code FROM webhook_deliveries WHERE endpoint_id = ANY($1) ORDER BY endpoint_id',
          [[a.webhookId, b.webhookId]],
        );
        expect(Object.fromEntries(codes.rows.map((r) => [r.endpoint_id, r.code]))).toEqual({
          [a.webhookId]: null,
          [b.webhookId]: 'WEBHOOK_SECRET_UNREADABLE',
        });
        const out = await t.db.query<{ status: string }>('SELECT status FROM webhook_outbox WHERE endpoint_id = $1', [b.webhookId]);
        expect(out.rows[0]?.status).toBe('pending');
      } finally {
        await new Promise<void>((r) => server.close(() => r()));
      }
    },
  );

  it(
    'rotation: before, the secrets open with the old KEK only; `secrets rotate` (stopped half-way, run again, and again) moves every one under the new KEK; after, the new KEK alone opens them',
    { timeout: DB_TEST_MS },
    async () => {
      t = await openTestDb(backend);
      const rows = [];
      for (let i = 0; i < 3; i++) rows.push(await secretsUnder(t.db, oldOnly));
      // a row an older cloud wrote in clear (before migration 0032) is sealed by the rotation as well
      const clear = rows[2];
      if (clear === undefined) throw new Error('seed');
      await t.db.query('UPDATE gateways SET credential_pepper = $2, credential_pepper_sealed = NULL WHERE id = $1', [
        clear.gatewayId,
        clear.pepper,
      ]);

      for (const r of rows.slice(0, 2)) expect(await unreadable(pepperOf(t.db, newOnly, r))).toBe('KEK_UNKNOWN');
      for (const r of rows) expect(await pepperOf(t.db, both, r)).toBe(r.pepper);

      const cli = async (args: string[]) => {
        const out: string[] = [];
        const err: string[] = [];
        const code = await runAdminCli(['secrets', 'rotate', ...args], {
          env: { TOBIRA_KEKS: `new:${NEW},old:${OLD}` },
          out: (x) => out.push(x),
          err: (x) => err.push(x),
          db: t.db,
        });
        return { code, result: JSON.parse(out.join('\n')) as { kid: string; rotated: number; remaining: number }, err };
      };
      // stopped after 2 rows: mixed key ids, every row still opens with the ring of both keys
      const first = await cli(['--batch', '1', '--limit', '2']);
      expect(first.code).toBe(1);
      expect(first.result).toMatchObject({ kid: 'new', rotated: 2, remaining: 4 });
      expect(first.err.map((l) => JSON.parse(l) as unknown)).toContainEqual({
        column: 'gateways.credential_pepper',
        rotated: 1,
        of: 3,
        unreadable: 0,
      });
      for (const r of rows) expect(await pepperOf(t.db, both, r)).toBe(r.pepper);

      const second = await cli(['--batch', '2']);
      expect(second.code).toBe(0);
      expect(second.result).toMatchObject({ kid: 'new', rotated: 4, remaining: 0 });
      expect(second.err.join('\n')).toContain('older KEKs may now be removed');
      // idempotent: nothing left to do, nothing written
      const third = await cli([]);
      expect(third).toMatchObject({ code: 0, result: { rotated: 0, remaining: 0 } });

      for (const r of rows) expect(await pepperOf(t.db, newOnly, r)).toBe(r.pepper);
      const secrets = await t.db.query<{ id: string; secret: string | null; secret_sealed: string }>(
        'SELECT id, secret, secret_sealed FROM webhook_endpoints WHERE id = ANY($1)',
        [rows.map((r) => r.webhookId)],
      );
      for (const r of rows) {
        const row = secrets.rows.find((x) => x.id === r.webhookId);
        expect(row?.secret).toBeNull();
        expect(newOnly.open(row?.secret_sealed ?? '', `webhook_endpoints.secret:${r.webhookId}`)).toMatchObject({
          ok: true,
          value: r.webhookSecret,
        });
      }
      const text = await dump(t.db);
      for (const r of rows) {
        expect(text).not.toContain(r.pepper);
        expect(text).not.toContain(r.webhookSecret);
      }
      expect(text).not.toContain('kek1:old:');
      for (const s of SEALED_SECRETS) {
        const n = await t.db.query<{ n: number | string }>(`SELECT count(*) AS n FROM ${s.table} WHERE ${s.clear} IS NOT NULL`);
        expect(Number(n.rows[0]?.n)).toBe(0);
      }
    },
  );

  it('secrets rotate without a KEK refuses with KEK_REQUIRED and writes nothing', { timeout: DB_TEST_MS }, async () => {
    t = await openTestDb(backend);
    const s = await secretsUnder(t.db, testSecrets);
    const err: string[] = [];
    const code = await runAdminCli(['secrets', 'rotate'], { env: {}, out: () => {}, err: (x) => err.push(x), db: t.db });
    expect(code).toBe(1);
    expect(err.join('\n')).toContain('KEK_REQUIRED');
    expect(await pepperOf(t.db, testSecrets, s)).toBe(s.pepper);
  });

  describe('a starting cloud', () => {
    let broker: MqttTestBroker;
    beforeAll(async () => {
      broker = await startMqttBackend('aedes');
    }, DB_TEST_MS);
    afterAll(async () => {
      await broker?.stop();
    });

    it(
      'seals the secrets an older cloud left in clear, and refuses to start with a KEK that does not open the stored ones (KEK_UNKNOWN, KEK_WRONG)',
      { timeout: DB_TEST_MS },
      async () => {
        t = await openTestDb(backend);
        const s = await secretsUnder(t.db, testSecrets);
        // as a cloud before migration 0032 left them
        await t.db.query('UPDATE gateways SET credential_pepper = $2, credential_pepper_sealed = NULL WHERE id = $1', [
          s.gatewayId,
          s.pepper,
        ]);
        await t.db.query('UPDATE webhook_endpoints SET secret = $2, secret_sealed = NULL WHERE id = $1', [s.webhookId, s.webhookSecret]);
        expect(await dump(t.db)).toContain(s.pepper);

        const refusedWith = async (env: Record<string, string>): Promise<string> => {
          try {
            const c = await startCloud(t, broker.url, { env });
            await c.stop();
            return 'started';
          } catch (e) {
            if (e instanceof ConfigError) return `${e.code} ${e.variable}`;
            throw e;
          }
        };
        const cloud = await startCloud(t, broker.url);
        try {
          const text = await dump(t.db);
          expect(text).not.toContain(s.pepper);
          expect(text).not.toContain(s.webhookSecret);
          expect(await pepperOf(t.db, cloud.secrets, s)).toBe(s.pepper);
          const w = await t.db.query<{ secret_sealed: string }>('SELECT secret_sealed FROM webhook_endpoints WHERE id = $1', [s.webhookId]);
          expect(cloud.secrets.open(w.rows[0]?.secret_sealed ?? '', `webhook_endpoints.secret:${s.webhookId}`)).toMatchObject({
            ok: true,
            value: s.webhookSecret,
          });
          expect(signWebhook(s.webhookSecret, 1, '{}')).toMatch(/^t=1,v1=/);
        } finally {
          await cloud.stop();
        }
        const testKid = derivedKid(Buffer.from(TEST_KEK, 'base64'));
        // another KEK: the rows name a key id it lacks
        expect(await refusedWith({ TOBIRA_KEK: NEW })).toBe('KEK_UNKNOWN TOBIRA_KEKS');
        // the rows' key id, but another key
        expect(await refusedWith({ TOBIRA_KEK: '', TOBIRA_KEKS: `${testKid}:${NEW}` })).toBe('KEK_WRONG TOBIRA_KEKS');
        // the old KEK kept in the ring behind a new one: it starts
        expect(await refusedWith({ TOBIRA_KEK: '', TOBIRA_KEKS: `new:${NEW},${testKid}:${TEST_KEK}` })).toBe('started');
      },
    );
  });
});
