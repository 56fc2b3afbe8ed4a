import { KeyGrant, credentialDigest } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { crashAt, SimulatedCrash } from '../src/app/crash.js';
import { expireKeys, getKey, issueKey, listKeyHistory, recordGatewayReport, revokeKey } from '../src/app/keys.js';
import { asGatewayId, asKeyId, newCorrelationId } from '@tobira/shared';
import { DAY, T0, capturingLogger, deps, openTestDb, seed, testLog, type TestDb } from './helpers.js';
import { readdir } from 'node:fs/promises';
import { MIGRATIONS_DIR, migrate } from '../src/adapters/db/migrate.js';
import { runKeyModel } from './keys-model.js';
import { loadKey } from '../src/adapters/db/keys.js';
import { waitFor } from './mqtt-helpers.js';
import { claim } from '../src/adapters/outbox/claim.js';
import { markSent } from '../src/adapters/outbox/mark-sent.js';
import { failRow } from '../src/adapters/outbox/fail.js';
import { retryDeadLetter } from '../src/adapters/outbox/dead-letters.js';
import { randomUUID } from 'node:crypto';
import { createDoor, createPerson, createSite, registerGateway } from '../src/app/registry.js';
import { generateSigningKeyPair } from '@tobira/shared';

describe.each(pgBackends())('entry-key verbs on %s', (backend) => {
  let t: TestDb;
  beforeAll(async () => {
    t = await openTestDb(backend);
  });
  afterAll(async () => {
    await t.close();
  });

  const outboxOf = async (gatewayId: string) =>
    (
      await t.db.query<{ seq: number; type: string; key_id: string; key_version: number; status: string; cid: string }>(
        'SELECT seq, type, key_id, key_version, status, cid FROM outbox WHERE gateway_id = $1 ORDER BY seq',
        [gatewayId],
      )
    ).rows;

  async function issue(
    d: ReturnType<typeof deps>,
    s: Awaited<ReturnType<typeof seed>>,
    over: Partial<Parameters<typeof issueKey>[1]> = {},
  ) {
    return issueKey(d, {
      personId: s.personId,
      doors: [s.doorA, s.doorB],
      credential: { type: 'pin', value: '123456' },
      validFrom: T0,
      validUntil: T0 + DAY,
      ...over,
    });
  }

  describe('migrations', () => {
    it('are recorded and applied once', async () => {
      const versions = (await t.db.query<{ version: number }>('SELECT version FROM schema_migrations ORDER BY version')).rows.map(
        (r) => r.version,
      );
      const files = (await readdir(MIGRATIONS_DIR)).filter((f) => /^\d{4}_[a-z0-9_]+\.sql$/.test(f)).sort();
      expect(versions).toEqual(files.map((f) => Number(f.slice(0, 4))));
      expect(versions.slice(0, 3)).toEqual([1, 2, 3]);
      expect(versions).toContain(5);
      expect(await migrate(t.db, testLog, T0)).toEqual([]);
    });
  });

  if (backend === 'postgres') {
    describe('LISTEN session (PostgreSQL)', () => {
      it('is re-opened after the server ends it, and notifications arrive again', async () => {
        const got: string[] = [];
        const unlisten = await t.db.listen('tobira_test_channel', (p) => got.push(p));
        try {
          const pid = async () =>
            (
              await t.db.query<{ pid: number }>(
                `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'`,
              )
            ).rows[0]?.pid;
          const before = await pid();
          expect(before).toBeDefined();
          await t.db.query('SELECT pg_terminate_backend($1)', [before]);
          await waitFor(async () => {
            const now = await pid();
            return now !== undefined && now !== before;
          }, 're-opened LISTEN session');
          await t.db.query(`SELECT pg_notify('tobira_test_channel', 'after')`);
          await waitFor(() => got.includes('after'), 'notification after re-open');
        } finally {
          await unlisten();
        }
      });

      it("a transaction's connection ended by the server while it awaits something else fails that transaction, never the process", async () => {
        // a pooled client that errors while checked out emits 'error' with no pool listener: unhandled, it kills the cloud
        const crashes: unknown[] = [];
        const onCrash = (e: unknown) => crashes.push(e);
        process.on('uncaughtException', onCrash);
        try {
          const tx = t.db.transaction(async (q) => {
            const me = (await q.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
            await t.db.query('SELECT pg_terminate_backend($1)', [me]);
            // the session is gone while this transaction is busy elsewhere (a Stripe call, say)
            await new Promise((r) => setTimeout(r, 200));
            await q.query('SELECT 1');
          });
          await expect(tx).rejects.toThrow();
          expect(crashes).toEqual([]);
          // the pool hands out a working connection afterwards
          expect((await t.db.query<{ one: number }>('SELECT 1 AS one')).rows[0]?.one).toBe(1);
        } finally {
          process.off('uncaughtException', onCrash);
        }
      });
    });
  }

  describe('outbox SQL verbs', () => {
    const policy = { baseMs: 1000, maxMs: 60_000, maxAttempts: 2 };
    const statusOf = async (gatewayId: string) =>
      (
        await t.db.query<{ seq: number; status: string; attempts: number; lease_token: string | null }>(
          'SELECT seq, status, attempts, lease_token FROM outbox WHERE gateway_id = $1 ORDER BY seq',
          [gatewayId],
        )
      ).rows;
    // other tests' rows share this database: claims here take everything due, so give each claim a far-future "now" only for our gateway's rows
    async function twoRows() {
      const d = deps(t.db);
      const s = await seed(d);
      await issue(d, s, { credential: { type: 'pin', value: '700001' } });
      await issue(d, s, { credential: { type: 'pin', value: '700002' } });
      // park every other pending row so that claims below see only this gateway's rows
      await t.db.query(`UPDATE outbox SET next_attempt_at = 9e15 WHERE status = 'pending' AND gateway_id <> $1`, [s.gatewayId]);
      return s;
    }

    it('concurrent claims never share a row nor split a gateway (seq 2 waits for 1); a lost lease cannot mark; others stay as they were', async () => {
      const s = await twoRows();
      const [a, b] = await Promise.all([
        t.db.transaction((tx) => claim(tx, { token: randomUUID(), now: T0, leaseMs: 1000, limit: 1 })),
        t.db.transaction((tx) => claim(tx, { token: randomUUID(), now: T0, leaseMs: 1000, limit: 1 })),
      ]);
      const claimed = [...(a ?? []), ...(b ?? [])];
      // claims are ordered per gateway (migration 0021, claim.ts): while seq 1 is leased, seq 2 is nobody's
      expect(claimed.map((r) => r.seq)).toEqual([1]);
      const first = claimed.find((r) => r.seq === 1);
      if (!first) throw new Error('claim');
      // nothing is due before the lease runs out
      expect(await t.db.transaction((tx) => claim(tx, { token: randomUUID(), now: T0 + 999, leaseMs: 1000, limit: 10 }))).toEqual([]);
      // after it, another dispatcher takes the row over, and the first one's mark changes nothing
      const again = await t.db.transaction((tx) => claim(tx, { token: randomUUID(), now: T0 + 1000, leaseMs: 1000, limit: 10 }));
      const second = again.find((r) => r.seq === 1);
      expect(second?.attempts).toBe(2);
      expect(await markSent(t.db, first.id, first.leaseToken, T0 + 1001)).toBe(0);
      expect(await markSent(t.db, first.id, second?.leaseToken ?? '', T0 + 1001)).toBe(1);
      const rows = await statusOf(s.gatewayId);
      expect(rows.map((r) => [r.seq, r.status])).toEqual([
        [1, 'sent'],
        [2, 'sending'],
      ]);
    });

    it('fail backs off, then dead-letters at the last attempt; an operator retry makes it pending again', async () => {
      const s = await twoRows();
      const [r1] = await t.db.transaction((tx) => claim(tx, { token: randomUUID(), now: T0, leaseMs: 1000, limit: 1 }));
      if (!r1) throw new Error('claim');
      expect(await failRow(t.db, r1, 'boom', T0, policy, 0)).toBe('pending');
      expect(await t.db.transaction((tx) => claim(tx, { token: randomUUID(), now: T0 + 499, leaseMs: 1000, limit: 10 }))).toEqual(
        expect.not.arrayContaining([expect.objectContaining({ id: r1.id })]),
      );
      const [again] = (await t.db.transaction((tx) => claim(tx, { token: randomUUID(), now: T0 + 500, leaseMs: 1000, limit: 10 }))).filter(
        (r) => r.id === r1.id,
      );
      if (!again) throw new Error('reclaim');
      expect(await failRow(t.db, { ...again, leaseToken: randomUUID() }, 'x', T0, policy, 0)).toBeNull(); // not the lease holder
      expect(await failRow(t.db, again, 'boom again', T0 + 500, policy, 0)).toBe('dead');
      expect((await statusOf(s.gatewayId)).find((r) => r.seq === r1.seq)).toMatchObject({ status: 'dead', attempts: 2, lease_token: null });
      expect(await retryDeadLetter(t.db, r1.id, T0 + 600)).toBe(1);
      expect(await retryDeadLetter(t.db, r1.id, T0 + 600)).toBe(0);
      expect((await statusOf(s.gatewayId)).find((r) => r.seq === r1.seq)).toMatchObject({ status: 'pending', attempts: 0 });
    });
  });

  describe('bad input', () => {
    it('is refused with a code and writes nothing', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      expect(await issue(d, s, { credential: { type: 'pin', value: 'abc' } })).toMatchObject({
        status: 'refused',
        code: 'INVALID_CREDENTIAL',
      });
      expect(await issue(d, s, { credential: { type: 'card', value: 'XYZ!' } })).toMatchObject({
        status: 'refused',
        code: 'INVALID_CREDENTIAL',
      });
      expect(await issue(d, s, { keyId: 'has space' })).toMatchObject({ status: 'refused', code: 'INVALID_REQUEST' });
      expect(
        await issue(d, s, { schedule: { timeZone: 'Asia/Tokyo', windows: [{ days: [9], start: '25:00', end: '10:00' }] } }),
      ).toMatchObject({
        status: 'refused',
        code: 'INVALID_SCHEDULE',
      });
      // a zone no door could evaluate is refused where it enters
      expect(
        await issue(d, s, { schedule: { timeZone: 'Mars/Olympus', windows: [{ days: [1], start: '08:00', end: '10:00' }] } }),
      ).toMatchObject({
        status: 'refused',
        code: 'INVALID_SCHEDULE',
      });
      expect(await createSite(d, { name: 'x', timeZone: 'Mars/Olympus' })).toMatchObject({ status: 'refused', code: 'INVALID_REQUEST' });
      expect(await revokeKey(d, { keyId: 'k', reason: 'bored' as never })).toMatchObject({ status: 'refused', code: 'INVALID_REQUEST' });
      expect(await outboxOf(s.gatewayId)).toEqual([]);
      expect(await createDoor(d, { id: s.doorA, gatewayId: s.gatewayId, name: 'again' })).toMatchObject({
        status: 'refused',
        code: 'ALREADY_EXISTS',
      });
      expect(await createDoor(d, { id: 'bad id', gatewayId: s.gatewayId, name: 'x' })).toMatchObject({
        status: 'refused',
        code: 'INVALID_REQUEST',
      });
      expect(await createDoor(d, { gatewayId: 'gw-nope', name: 'x' })).toMatchObject({ status: 'refused', code: 'GATEWAY_NOT_FOUND' });
      expect(await createPerson(d, { id: s.personId, name: 'x' })).toMatchObject({ status: 'refused', code: 'ALREADY_EXISTS' });
      expect(await createSite(d, { id: s.siteId, name: 'x' })).toMatchObject({ status: 'refused', code: 'ALREADY_EXISTS' });
      const pair = await generateSigningKeyPair();
      const cloud = { issuer: 'tobira-cloud', jwks: { keys: [] } };
      expect(await registerGateway(d, cloud, { gatewayId: s.gatewayId, siteId: s.siteId, publicJwk: pair.publicJwk })).toMatchObject({
        code: 'GATEWAY_ALREADY_EXISTS',
      });
      expect(await registerGateway(d, cloud, { gatewayId: `gw-x-${s.u}`, siteId: s.siteId, publicJwk: pair.privateJwk })).toMatchObject({
        code: 'INVALID_PUBLIC_KEY',
      });
      expect(await registerGateway(d, cloud, { gatewayId: `gw-x-${s.u}`, siteId: 'nope', publicJwk: pair.publicJwk })).toMatchObject({
        code: 'SITE_NOT_FOUND',
      });
      expect(await registerGateway(d, cloud, { gatewayId: 'bad/id', siteId: s.siteId, publicJwk: pair.publicJwk })).toMatchObject({
        code: 'INVALID_REQUEST',
      });
    });
  });

  describe('when a key is issued', () => {
    it('stores the digest (never the clear PIN), writes history and queues the grant with seq 1', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      const o = await issue(d, s);
      expect(o).toMatchObject({ status: 'applied', code: 'KEY_ISSUED' });
      if (o.status !== 'applied') return;
      // the seq is taken at the commit: the outcome names the row, the row has seq 1
      expect(o.emits).toEqual([expect.objectContaining({ gatewayId: s.gatewayId, type: 'key.grant' })]);
      const row = (await t.db.query<Record<string, unknown>>('SELECT * FROM keys WHERE id = $1', [o.state.id])).rows[0];
      expect(JSON.stringify(row)).not.toContain('123456');
      expect(row?.credential_digest).toBe(credentialDigest(Buffer.from(s.provisioning.credentialPepper, 'base64url'), 'pin', '123456'));
      expect(await listKeyHistory(d, o.state.id)).toEqual([
        expect.objectContaining({ event: 'issue', fromStatus: null, toStatus: 'issuing', cid: o.cid }),
      ]);
      expect(await outboxOf(s.gatewayId)).toEqual([
        { seq: 1, type: 'key.grant', key_id: o.state.id, key_version: 1, status: 'pending', cid: o.cid },
      ]);
    });

    it("queues a grant with the person's and doors' display names, leaving out a name the wire cannot carry", async () => {
      const d = deps(t.db);
      const s = await seed(d);
      await t.db.query(`UPDATE doors SET name = 'B' || chr(7) WHERE id = $1`, [s.doorB]); // a control character
      const o = await issue(d, s);
      expect(o).toMatchObject({ status: 'applied', code: 'KEY_ISSUED' });
      const body = (await t.db.query<{ body: { key: KeyGrant } }>('SELECT body FROM outbox WHERE gateway_id = $1', [s.gatewayId])).rows[0]
        ?.body;
      expect(body?.key).toMatchObject({ personName: 'Hana', doorNames: { [s.doorA]: 'A' } });
      expect(body?.key.doorNames).not.toHaveProperty(s.doorB);
      expect(KeyGrant.safeParse(body?.key).success).toBe(true); // what the gateway's strict schema takes
    });

    it('marks staff keys in the grant (staff: true asked, or offline-capable) and nowhere else; the marker is part of the content', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      const grantOf = async (keyId: string) =>
        (await t.db.query<{ body: { key: KeyGrant } }>('SELECT body FROM outbox WHERE key_id = $1', [keyId])).rows[0]?.body.key;
      const staff = await issue(d, s, { keyId: `staff-${s.u}`, staff: true, credential: { type: 'pin', value: '310001' } });
      const master = await issue(d, s, { keyId: `master-${s.u}`, offlineCapable: true, credential: { type: 'pin', value: '310002' } });
      const guest = await issue(d, s, { keyId: `guest-${s.u}`, staff: false, credential: { type: 'pin', value: '310003' } });
      expect([staff, master, guest].map((o) => [o.status, o.status === 'applied' ? o.state.staff : null])).toEqual([
        ['applied', true],
        ['applied', true],
        ['applied', false],
      ]);
      expect((await grantOf(`staff-${s.u}`))?.staff).toBe(true);
      expect((await grantOf(`master-${s.u}`))?.staff).toBe(true);
      expect(await grantOf(`guest-${s.u}`)).not.toHaveProperty('staff');
      for (const k of ['staff', 'master', 'guest']) expect(KeyGrant.safeParse(await grantOf(`${k}-${s.u}`)).success).toBe(true);
      // the same issue again is a noop; the same key without the marker is another key (conflict), nothing queued
      expect(await issue(d, s, { keyId: `staff-${s.u}`, staff: true, credential: { type: 'pin', value: '310001' } })).toMatchObject({
        status: 'noop',
      });
      expect(
        await issue(d, s, { keyId: `master-${s.u}`, offlineCapable: true, credential: { type: 'pin', value: '310002' } }),
      ).toMatchObject({
        status: 'noop',
      });
      expect(await issue(d, s, { keyId: `staff-${s.u}`, credential: { type: 'pin', value: '310001' } })).toMatchObject({
        status: 'conflict',
        code: 'KEY_ALREADY_EXISTS',
      });
      // a key stored before the column (staff false) that is offline-capable still reads, and is sent, as staff
      await t.db.query('UPDATE keys SET staff = false WHERE id = $1', [`master-${s.u}`]);
      expect((await t.db.query<{ staff: boolean }>('SELECT staff FROM keys WHERE id = $1', [`master-${s.u}`])).rows[0]?.staff).toBe(false);
      expect((await loadKey(t.db, `master-${s.u}`))?.staff).toBe(true);
      expect(await outboxOf(s.gatewayId)).toHaveLength(3);
    });

    it('refuses doors behind two gateways, unknown doors and unknown people, writing nothing', async () => {
      const d = deps(t.db);
      const s1 = await seed(d);
      const s2 = await seed(d);
      expect(await issue(d, s1, { doors: [s1.doorA, s2.doorA] })).toMatchObject({ status: 'refused', code: 'DOORS_SPAN_GATEWAYS' });
      expect(await issue(d, s1, { doors: ['nope'] })).toMatchObject({ status: 'refused', code: 'DOOR_NOT_FOUND' });
      expect(await issue(d, s1, { personId: 'nobody' })).toMatchObject({ status: 'refused', code: 'PERSON_NOT_FOUND' });
      expect(await outboxOf(s1.gatewayId)).toEqual([]);
    });

    it('refuses a second live key with the same credential at one gateway', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      expect(await issue(d, s)).toMatchObject({ status: 'applied' });
      expect(await issue(d, s)).toMatchObject({ status: 'refused', code: 'CREDENTIAL_IN_USE' });
    });

    it('is a noop when the same key id is issued again with the same content', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      const keyId = `k-${s.u}`;
      expect(await issue(d, s, { keyId })).toMatchObject({ status: 'applied' });
      expect(await issue(d, s, { keyId })).toMatchObject({ status: 'noop', code: 'KEY_ALREADY_ISSUED' });
      expect(await issue(d, s, { keyId, validUntil: T0 + 2 * DAY, credential: { type: 'pin', value: '999999' } })).toMatchObject({
        status: 'conflict',
        code: 'KEY_ALREADY_EXISTS',
      });
      expect(await outboxOf(s.gatewayId)).toHaveLength(1);
    });
  });

  describe('when a key is revoked', () => {
    it('moves to revoking, queues the revoke at seq 2 with version 2, and a second revoke is a noop', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      const o = await issue(d, s);
      if (o.status !== 'applied') throw new Error('issue');
      const r = await revokeKey(d, { keyId: o.state.id, reason: 'stay_cancelled' });
      expect(r).toMatchObject({ status: 'applied', code: 'KEY_REVOKE_QUEUED', state: { status: 'revoking', version: 2 } });
      expect(await revokeKey(d, { keyId: o.state.id, reason: 'staff_revoked' })).toMatchObject({
        status: 'noop',
        code: 'KEY_ALREADY_REVOKED',
      });
      expect((await outboxOf(s.gatewayId)).map((r) => [r.seq, r.type, r.key_version])).toEqual([
        [1, 'key.grant', 1],
        [2, 'key.revoke', 2],
      ]);
      const h = await listKeyHistory(d, o.state.id);
      expect(h.map((x) => [x.event, x.toStatus, x.reason])).toEqual([
        ['issue', 'issuing', null],
        ['revoke', 'revoking', 'stay_cancelled'],
      ]);
    });

    it('answers revoke of an unknown key with KEY_NOT_FOUND', async () => {
      expect(await revokeKey(deps(t.db), { keyId: 'no-such-key', reason: 'staff_revoked' })).toMatchObject({
        status: 'refused',
        code: 'KEY_NOT_FOUND',
      });
    });

    it('lets exactly one of many concurrent revokes win; the others are noops', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      const o = await issue(d, s);
      if (o.status !== 'applied') throw new Error('issue');
      const results = await Promise.all(Array.from({ length: 6 }, () => revokeKey(d, { keyId: o.state.id, reason: 'staff_revoked' })));
      expect(results.filter((r) => r.status === 'applied')).toHaveLength(1);
      expect(results.filter((r) => r.status !== 'applied').every((r) => r.status === 'noop' && r.code === 'KEY_ALREADY_REVOKED')).toBe(
        true,
      );
      expect(await outboxOf(s.gatewayId)).toHaveLength(2);
    });

    it('conflicts when the caller names a revision that is no longer current', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      const o = await issue(d, s);
      if (o.status !== 'applied') throw new Error('issue');
      expect(await revokeKey(d, { keyId: o.state.id, reason: 'staff_revoked', expectedRevision: 5 })).toMatchObject({
        status: 'conflict',
        code: 'KEY_STATE_CHANGED',
      });
    });
  });

  describe('concurrent issue and revoke', () => {
    it('gives each key version one writer and keeps seqs gap-free', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      const keyIds = Array.from({ length: 5 }, (_, i) => `k${i}-${s.u}`);
      const ops = keyIds.flatMap((keyId, i) => [
        issue(d, s, { keyId, credential: { type: 'pin', value: `10000${i}` } }),
        issue(d, s, { keyId, credential: { type: 'pin', value: `10000${i}` } }),
        revokeKey(d, { keyId, reason: 'staff_revoked' }),
        revokeKey(d, { keyId, reason: 'credential_lost' }),
      ]);
      const results = await Promise.all(ops);
      for (const r of results) expect(['applied', 'noop', 'conflict', 'refused']).toContain(r.status);
      const rows = await outboxOf(s.gatewayId);
      expect(rows.map((r) => r.seq)).toEqual(rows.map((_, i) => i + 1));
      for (const keyId of keyIds) {
        const mine = rows.filter((r) => r.key_id === keyId);
        // at most one grant (v1) and one revoke (v2) per key, each version written once
        expect(new Set(mine.map((r) => r.key_version)).size).toBe(mine.length);
        const k = await getKey(d, keyId);
        const history = await listKeyHistory(d, keyId);
        expect(history.length).toBe(mine.length);
        if (k) expect(k.version).toBe(Math.max(...mine.map((r) => r.key_version)));
      }
    });
  });

  describe('seqs taken at the commit', () => {
    const pin = (n: number) => ({ type: 'pin' as const, value: `77${String(n).padStart(4, '0')}` });

    it('a key verb in a caller transaction has no seq inside it, takes the next one at the commit in queue order, and a rollback leaves no gap', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      const rolledBack = await t.db
        .transaction(async (tx) => {
          await issue({ ...d, db: tx }, s, { keyId: `rb-${s.u}`, credential: pin(1) });
          throw new Error('roll back');
        })
        .catch((e: unknown) => e);
      expect(rolledBack).toBeInstanceOf(Error);
      const inside = await t.db.transaction(async (tx) => {
        const a = await issue({ ...d, db: tx }, s, { keyId: `a-${s.u}`, credential: pin(2) });
        const b = await issue({ ...d, db: tx }, s, { keyId: `b-${s.u}`, credential: pin(3) });
        const seqs = await tx.query<{ key_id: string; seq: number | null }>('SELECT key_id, seq FROM outbox WHERE gateway_id = $1', [
          s.gatewayId,
        ]);
        return { a: a.status, b: b.status, seqs: seqs.rows };
      });
      expect(inside).toEqual({
        a: 'applied',
        b: 'applied',
        seqs: expect.arrayContaining([
          { key_id: `a-${s.u}`, seq: null },
          { key_id: `b-${s.u}`, seq: null },
        ]),
      });
      expect((await outboxOf(s.gatewayId)).map((r) => [r.key_id, Number(r.seq)])).toEqual([
        [`a-${s.u}`, 1],
        [`b-${s.u}`, 2],
      ]);
      await issue(d, s, { keyId: `c-${s.u}`, credential: pin(4) });
      expect((await outboxOf(s.gatewayId)).map((r) => Number(r.seq))).toEqual([1, 2, 3]);
    });

    if (backend === 'postgres') {
      it('seqs follow commit order, and an open transaction holding a queued row does not hold up another issue to the gateway', async () => {
        const d = deps(t.db);
        const s = await seed(d);
        const order = await t.db.transaction(async (tx) => {
          await issue({ ...d, db: tx }, s, { keyId: `first-${s.u}`, credential: pin(5) });
          // queued first, still open: a second issue on another connection commits meanwhile (it waited on a seq lock before)
          const second = await issue(d, s, { keyId: `second-${s.u}`, credential: pin(6) });
          return second.status;
        });
        expect(order).toBe('applied');
        expect((await outboxOf(s.gatewayId)).map((r) => [r.key_id, Number(r.seq)])).toEqual([
          [`second-${s.u}`, 1],
          [`first-${s.u}`, 2],
        ]);
      });
    }
  });

  describe('when the gateway reports', () => {
    it('activates on an ack of the grant version, ignores older versions, confirms a revoke', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      const o = await issue(d, s);
      if (o.status !== 'applied') throw new Error('issue');
      const keyId = asKeyId(o.state.id);
      const gatewayId = asGatewayId(s.gatewayId);
      const ack = (keyVersion: number) =>
        recordGatewayReport(d, { keyId, gatewayId, keyVersion, result: 'applied', code: 'MESSAGE_APPLIED', cid: newCorrelationId() });
      expect(await ack(1)).toMatchObject({ status: 'applied', code: 'KEY_ACTIVATED' });
      expect(await ack(1)).toMatchObject({ status: 'noop', code: 'KEY_ALREADY_ACTIVE' });
      await revokeKey(d, { keyId, reason: 'membership_ended' });
      expect(await ack(1)).toMatchObject({ status: 'noop', code: 'REPORT_IGNORED' });
      expect(await ack(2)).toMatchObject({ status: 'applied', code: 'KEY_REVOKE_CONFIRMED', state: { status: 'revoked' } });
    });
  });

  describe('when validity ends', () => {
    it('the sweeper expires live keys past validUntil and leaves the others as they were', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      const short = await issue(d, s, { validUntil: T0 + 1000, credential: { type: 'card', value: 'ABCD01' } });
      const long = await issue(d, s, { validUntil: T0 + DAY, credential: { type: 'card', value: 'ABCD02' } });
      if (short.status !== 'applied' || long.status !== 'applied') throw new Error('issue');
      d.clock.advance(2000);
      const r = await expireKeys(d);
      expect(r.expired).toContain(short.state.id);
      expect(r.expired).not.toContain(long.state.id);
      expect(await getKey(d, short.state.id)).toMatchObject({ status: 'expired', revision: 2 });
      expect(await getKey(d, long.state.id)).toMatchObject({ status: 'issuing', revision: 1 });
    });
  });

  describe('any sequence of issue, revoke, acks (late, duplicate, refused) and crashes', () => {
    it('leaves the database equal to the model, with gap-free seqs and one history row per transition', async () => {
      await runKeyModel(t.db);
    });
  });

  describe('logs', () => {
    it('carry the command cid on every line a verb writes', async () => {
      const { log, lines } = await capturingLogger();
      const d = { ...deps(t.db), log };
      const s = await seed(d);
      const cid = newCorrelationId();
      const o = await issue(d, s, { cid });
      if (o.status !== 'applied') throw new Error('issue');
      const rcid = newCorrelationId();
      await revokeKey(d, { keyId: o.state.id, reason: 'staff_revoked', cid: rcid });
      const verbLines = lines.filter((l) => l.verb !== undefined);
      expect(verbLines.length).toBeGreaterThanOrEqual(2);
      expect(verbLines.filter((l) => l.verb === 'issueKey').every((l) => l.cid === cid)).toBe(true);
      expect(verbLines.filter((l) => l.verb === 'revokeKey').every((l) => l.cid === rcid)).toBe(true);
      expect(verbLines.filter((l) => l.verb === 'revokeKey').length).toBeGreaterThan(0);
      // and the cid travels in the outbox row
      expect((await outboxOf(s.gatewayId)).map((r) => r.cid)).toEqual([cid, rcid]);
    });
  });

  describe('database enforcement', () => {
    it('refuses a direct status update outside a verb', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      const o = await issue(d, s);
      if (o.status !== 'applied') throw new Error('issue');
      await expect(t.db.query(`UPDATE keys SET status = 'active' WHERE id = $1`, [o.state.id])).rejects.toThrow(
        /verb guard: keys\.status issuing -> active is not a move of verb \(none: tobira\.verb unset\)/,
      );
      await expect(t.db.query(`UPDATE keys SET version = 9 WHERE id = $1`, [o.state.id])).rejects.toThrow(
        /keys\.version may only change inside a verb/,
      );
      expect(await getKey(d, o.state.id)).toMatchObject({ status: 'issuing', version: 1 });
      // a column no guard names may change (the triggers guard status and version only)
      expect((await t.db.query(`UPDATE keys SET updated_at = updated_at WHERE id = $1`, [o.state.id])).rowCount).toBe(1);
    });

    it('reports a row that cannot be a key as CorruptRow, never as a half-built key', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      const o = await issue(d, s);
      if (o.status !== 'applied') throw new Error('issue');
      await t.db.query(`UPDATE keys SET doors = '"not-a-list"'::jsonb WHERE id = $1`, [o.state.id]);
      await expect(getKey(d, o.state.id)).rejects.toThrow(/corrupt row in keys/);
      await expect(revokeKey(d, { keyId: o.state.id, reason: 'staff_revoked' })).rejects.toThrow(/corrupt row/);
    });

    it('refuses an outbox status change that is not in the outbox state machine', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      await issue(d, s);
      await expect(t.db.query(`UPDATE outbox SET status = 'sent' WHERE gateway_id = $1`, [s.gatewayId])).rejects.toThrow(
        /not a transition/,
      );
      await expect(t.db.query(`UPDATE outbox SET status = 'dead' WHERE gateway_id = $1`, [s.gatewayId])).rejects.toThrow(
        /not a transition/,
      );
      expect((await outboxOf(s.gatewayId)).map((r) => r.status)).toEqual(['pending']);
    });

    it('refuses updating or deleting key history', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      const o = await issue(d, s);
      if (o.status !== 'applied') throw new Error('issue');
      await expect(t.db.query(`UPDATE key_history SET code = 'X' WHERE key_id = $1`, [o.state.id])).rejects.toThrow(/append-only/);
      await expect(t.db.query(`DELETE FROM key_history WHERE key_id = $1`, [o.state.id])).rejects.toThrow(/append-only/);
      expect(await listKeyHistory(d, o.state.id)).toHaveLength(1);
    });
  });

  describe('crash points inside the verb transaction', () => {
    it.each(['afterCasBeforeOutboxInsert', 'afterOutboxInsertBeforeCommit'] as const)(
      'a crash at %s leaves neither the key change nor the outbox row',
      async (point) => {
        const base = deps(t.db);
        const s = await seed(base);
        const o = await issue(base, s);
        if (o.status !== 'applied') throw new Error('issue');
        const crashing = deps(t.db, base.clock, { crash: crashAt([point]) });
        await expect(revokeKey(crashing, { keyId: o.state.id, reason: 'staff_revoked' })).rejects.toBeInstanceOf(SimulatedCrash);
        expect(await getKey(base, o.state.id)).toMatchObject({ status: 'issuing', version: 1, revision: 1 });
        expect(await outboxOf(s.gatewayId)).toHaveLength(1);
        expect(await listKeyHistory(base, o.state.id)).toHaveLength(1);
        // after "restart" the verb works and takes the next seq with no gap
        expect(await revokeKey(base, { keyId: o.state.id, reason: 'staff_revoked' })).toMatchObject({ status: 'applied' });
        expect((await outboxOf(s.gatewayId)).map((r) => r.seq)).toEqual([1, 2]);
      },
    );

    it('a crash after commit leaves both the key change and the outbox row', async () => {
      const base = deps(t.db);
      const s = await seed(base);
      const crashing = deps(t.db, base.clock, { crash: crashAt(['afterCommitBeforePublish']) });
      await expect(issue(crashing, s, { keyId: `k-${s.u}` })).rejects.toBeInstanceOf(SimulatedCrash);
      expect(await getKey(base, `k-${s.u}`)).toMatchObject({ status: 'issuing' });
      expect(await outboxOf(s.gatewayId)).toHaveLength(1);
    });
  });
});
