import { SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ManualClock,
  importSigningKey,
  newCorrelationId,
  newId,
  newMessageId,
  signMessage,
  topics,
  type KeyPairJwk,
  type UplinkBatchMessage,
} from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { fixedSigner } from '../src/adapters/signer.js';
import { disconnectedLink } from './mqtt-helpers.js';
import { crashAt, SimulatedCrash } from '../src/app/crash.js';
import { Uplink } from '../src/app/uplink.js';
import { listAudit } from '../src/adapters/db/audit.js';
import { T0, deps, openTestDb, seed, type TestDb } from './helpers.js';
import { cloudSigningKey } from './cloud-helpers.js';

type Item = UplinkBatchMessage['body']['items'][number];

const accessItem = (seq: number, doorId: string, i = seq): Item => ({
  type: 'access.event',
  seq,
  jti: newMessageId(),
  cid: newCorrelationId(),
  body: {
    eventId: newId(),
    requestId: `r-${i}`,
    lockId: 'lock-1',
    doorId,
    at: T0 + i,
    allowed: false,
    code: 'UNKNOWN_CREDENTIAL',
    keyId: null,
    keyVersion: null,
    personId: null,
    credentialType: 'pin',
    commandId: null,
  },
});

/**
 * Signs claims as the gateway would, without signMessage's own checks: an
 * attacker, or a buggy gateway, is not bound by them.
 */
async function signRaw(pair: KeyPairJwk, claims: Record<string, unknown>): Promise<string> {
  const key = await importSigningKey(pair.privateJwk);
  const iat = Math.floor(T0 / 1000);
  return new SignJWT({ iat, exp: iat + 86_400, jti: newMessageId(), cid: newCorrelationId(), ...claims })
    .setProtectedHeader({ alg: 'EdDSA', typ: 'tobira-msg+jwt', kid: key.kid })
    .sign(key.privateKey);
}

describe.each(pgBackends())('uplink.batch on %s', (pgBackend) => {
  let t: TestDb;
  beforeAll(async () => {
    t = await openTestDb(pgBackend);
  });
  afterAll(async () => {
    await t.close();
  });

  async function setup(opts: { crashAtApply?: boolean } = {}) {
    const clock = new ManualClock(T0);
    const d = deps(t.db, clock);
    const s = await seed(d);
    const key = await cloudSigningKey();
    const inbox = new Uplink(opts.crashAtApply === true ? { ...d, crash: crashAt(['afterInboxInsertBeforeApply']) } : d, {
      link: disconnectedLink,
      signer: fixedSigner('tobira-cloud', await importSigningKey(key.privateJwk), { keys: [key.publicJwk] }),
      replayMax: 10,
      publishTimeoutMs: 100,
    });
    const topic = topics.gatewayUp(s.gatewayId);
    const batch = async (items: Item[]) => {
      const { token } = await signMessage<UplinkBatchMessage>(
        await importSigningKey(s.pair.privateJwk),
        s.gatewayId,
        { type: 'uplink.batch', aud: 'tobira-cloud', cid: newCorrelationId(), body: { items } },
        clock,
      );
      return Buffer.from(token);
    };
    const raw = (claims: Record<string, unknown>) =>
      signRaw(s.pair, { iss: s.gatewayId, aud: 'tobira-cloud', ...claims }).then(Buffer.from);
    const audit = async () => (await listAudit(t.db, { gatewayId: s.gatewayId })).map((a) => a.seq);
    const inboxRows = async () =>
      (await t.db.query<{ seq: string }>('SELECT seq FROM uplink_inbox WHERE gateway_id = $1 ORDER BY seq', [s.gatewayId])).rows.map((r) =>
        Number(r.seq),
      );
    const acked = async () =>
      Number(
        (await t.db.query<{ acked_seq: string }>('SELECT acked_seq FROM uplink_seq WHERE gateway_id = $1', [s.gatewayId])).rows[0]
          ?.acked_seq ?? 0,
      );
    const rejected = async () =>
      (await t.db.query<{ code: string }>('SELECT code FROM rejected_uplinks WHERE gateway_id = $1 ORDER BY id', [s.gatewayId])).rows.map(
        (r) => r.code,
      );
    return { s, inbox, topic, batch, raw, audit, inboxRows, acked, rejected, clock };
  }

  describe('a well-formed batch', () => {
    it('is applied in seq order: every item once, the acknowledgement pointer on its last seq', async () => {
      const g = await setup();
      const items = [1, 2, 3, 4, 5].map((q) => accessItem(q, g.s.doorA));
      await g.inbox.handle(g.topic, await g.batch(items));
      expect(await g.audit()).toEqual([1, 2, 3, 4, 5]);
      expect(await g.inboxRows()).toEqual([1, 2, 3, 4, 5]);
      expect(await g.acked()).toBe(5);
      expect(await g.rejected()).toEqual([]);
    });

    it('of mixed types applies each with its own effect, as if each had come alone', async () => {
      const g = await setup();
      const alarmId = newId();
      const actionId = newId();
      const items: Item[] = [
        accessItem(1, g.s.doorA),
        {
          type: 'alarm',
          seq: 2,
          jti: newMessageId(),
          cid: newCorrelationId(),
          body: { alarmId, lockId: 'lock-1', doorId: g.s.doorA, kind: 'forced_open', at: T0 },
        },
        {
          type: 'staff.action',
          seq: 3,
          jti: newMessageId(),
          cid: newCorrelationId(),
          body: {
            actionId,
            at: T0,
            actor: { accountId: null, name: 'API token' },
            action: 'set_mode',
            target: 'lockdown',
            detail: null,
            result: 'applied',
            code: null,
          },
        },
        {
          type: 'gateway.status',
          seq: 4,
          jti: newMessageId(),
          cid: newCorrelationId(),
          body: { mode: 'normal', appliedSeq: 0, leaseExpiresAt: null, outboxDepth: 0, locks: [] },
        },
      ];
      await g.inbox.handle(g.topic, await g.batch(items));
      expect(await g.audit()).toEqual([1]);
      expect((await t.db.query('SELECT 1 FROM alarms WHERE alarm_id = $1', [alarmId])).rowCount).toBe(1);
      expect((await t.db.query('SELECT seq FROM staff_actions WHERE action_id = $1', [actionId])).rows).toEqual([
        { seq: expect.anything() },
      ]);
      const inbox = await t.db.query<{ type: string; result: string }>(
        'SELECT type, result FROM uplink_inbox WHERE gateway_id = $1 ORDER BY seq',
        [g.s.gatewayId],
      );
      expect(inbox.rows).toEqual(['access.event', 'alarm', 'staff.action', 'gateway.status'].map((type) => ({ type, result: 'applied' })));
      expect(await g.acked()).toBe(4);
    });

    it('from a gateway whose history started again (new jtis at seqs already acknowledged) is applied, and the pointer restarts', async () => {
      const g = await setup();
      await g.inbox.handle(g.topic, await g.batch([1, 2, 3].map((q) => accessItem(q, g.s.doorA))));
      expect(await g.acked()).toBe(3);
      await g.inbox.handle(g.topic, await g.batch([1, 2].map((q) => accessItem(q, g.s.doorA, 10 + q))));
      expect(await g.acked()).toBe(2);
      expect((await g.audit()).sort()).toEqual([1, 1, 2, 2, 3]);
      const row = await t.db.query<{ max_seq: string; received: string; acked_jti: string }>(
        'SELECT max_seq, received, acked_jti FROM uplink_seq WHERE gateway_id = $1',
        [g.s.gatewayId],
      );
      expect(row.rows[0]).toMatchObject({ received: expect.anything() });
      expect(Number(row.rows[0]!.max_seq)).toBe(3);
      expect(Number(row.rows[0]!.received)).toBe(5);
      // the pointer the restart replaced is kept for the heartbeats to name (the gateway sees its restore)
      const lost = await t.db.query<{ lost_seq: string | null; lost_jti: string | null }>(
        'SELECT lost_seq, lost_jti FROM uplink_seq WHERE gateway_id = $1',
        [g.s.gatewayId],
      );
      expect(Number(lost.rows[0]!.lost_seq)).toBe(3);
      expect(lost.rows[0]!.lost_jti).not.toBeNull();
    });

    it('from a store put back from a backup (new jtis from a seq past 1) is acknowledged on from there', async () => {
      const g = await setup();
      await g.inbox.handle(g.topic, await g.batch([1, 2, 3, 4].map((q) => accessItem(q, g.s.doorA))));
      expect(await g.acked()).toBe(4);
      await g.inbox.handle(g.topic, await g.batch([3, 4].map((q) => accessItem(q, g.s.doorA, 10 + q))));
      expect(await g.acked()).toBe(4);
      await g.inbox.handle(g.topic, await g.batch([5].map((q) => accessItem(q, g.s.doorA, 10 + q))));
      expect(await g.acked()).toBe(5);
    });

    it('sent again (a new envelope, the same items) is a noop', async () => {
      const g = await setup();
      const items = [1, 2, 3].map((q) => accessItem(q, g.s.doorA));
      await g.inbox.handle(g.topic, await g.batch(items));
      const before = await t.db.query('SELECT jti, result, code, received_at FROM uplink_inbox WHERE gateway_id = $1 ORDER BY seq', [
        g.s.gatewayId,
      ]);
      g.clock.advance(1000);
      await g.inbox.handle(g.topic, await g.batch(items));
      expect(await g.audit()).toEqual([1, 2, 3]);
      const after = await t.db.query('SELECT jti, result, code, received_at FROM uplink_inbox WHERE gateway_id = $1 ORDER BY seq', [
        g.s.gatewayId,
      ]);
      expect(after.rows).toEqual(before.rows);
      expect(await g.acked()).toBe(3);
    });

    it('a resend that overlaps what was applied applies only the new items, in order', async () => {
      const g = await setup();
      const items = [1, 2, 3, 4, 5, 6].map((q) => accessItem(q, g.s.doorA));
      await g.inbox.handle(g.topic, await g.batch(items.slice(0, 4)));
      await g.inbox.handle(g.topic, await g.batch(items.slice(2, 6)));
      expect(await g.audit()).toEqual([1, 2, 3, 4, 5, 6]);
      expect(await g.inboxRows()).toEqual([1, 2, 3, 4, 5, 6]);
      expect(await g.acked()).toBe(6);
    });

    it('mixes with single messages: the pointer walks over both', async () => {
      const g = await setup();
      const items = [1, 2, 3, 4].map((q) => accessItem(q, g.s.doorA));
      const key = await importSigningKey(g.s.pair.privateJwk);
      const one = async (it: Item) =>
        Buffer.from(
          (
            await signMessage(
              key,
              g.s.gatewayId,
              { aud: 'tobira-cloud', type: it.type, seq: it.seq, jti: it.jti, cid: it.cid, body: it.body } as never,
              g.clock,
            )
          ).token,
        );
      await g.inbox.handle(g.topic, await one(items[0]!));
      await g.inbox.handle(g.topic, await g.batch(items.slice(1, 3)));
      await g.inbox.handle(g.topic, await one(items[2]!)); // the batch's item again, alone: a duplicate
      await g.inbox.handle(g.topic, await one(items[3]!));
      expect(await g.audit()).toEqual([1, 2, 3, 4]);
      expect(await g.acked()).toBe(4);
    });

    it('whose item the database refuses as data applies the others, one at a time, and records that one APPLY_FAILED', async () => {
      const g = await setup();
      const bad = accessItem(2, g.s.doorA);
      // jsonb refuses a NUL (SQLSTATE 22P05): the item verifies and passes its schema, the database refuses it
      Object.assign(bad.body as object, {
        allowed: true,
        code: 'REMOTE_UNLOCK',
        by: { accountId: 'a-1', name: 'Ken', reason: 'nul \u0000 here' },
      });
      await g.inbox.handle(g.topic, await g.batch([accessItem(1, g.s.doorA), bad, accessItem(3, g.s.doorA)]));
      expect(await g.audit()).toEqual([1, 3]);
      expect(await g.rejected()).toEqual(['APPLY_FAILED']);
    });

    it('a crash in the middle of the batch leaves nothing of it applied, and the redelivery applies all of it', async () => {
      const g = await setup({ crashAtApply: true });
      const payload = await g.batch([1, 2, 3].map((q) => accessItem(q, g.s.doorA)));
      await expect(g.inbox.handle(g.topic, payload)).rejects.toBeInstanceOf(SimulatedCrash);
      expect(await g.audit()).toEqual([]);
      expect(await g.inboxRows()).toEqual([]);
      const ok = new Uplink(deps(t.db, g.clock), {
        link: disconnectedLink,
        signer: fixedSigner('tobira-cloud', await importSigningKey((await cloudSigningKey()).privateJwk), { keys: [] }),
        replayMax: 10,
        publishTimeoutMs: 100,
      });
      await ok.handle(g.topic, payload);
      expect(await g.audit()).toEqual([1, 2, 3]);
    });
  });

  describe('a batch that breaks a rule is rejected as a whole, with its code, and nothing of it is applied', () => {
    const cases: [string, string, (g: Awaited<ReturnType<typeof setup>>) => Promise<Buffer>][] = [
      [
        'a gap between seqs',
        'BATCH_SEQ_NOT_CONSECUTIVE',
        (g) => g.raw({ type: 'uplink.batch', body: { items: [accessItem(1, g.s.doorA), accessItem(3, g.s.doorA)] } }),
      ],
      [
        'a decreasing seq',
        'BATCH_SEQ_NOT_CONSECUTIVE',
        (g) => g.raw({ type: 'uplink.batch', body: { items: [accessItem(2, g.s.doorA), accessItem(1, g.s.doorA)] } }),
      ],
      [
        'a repeated seq',
        'BATCH_SEQ_NOT_CONSECUTIVE',
        (g) => g.raw({ type: 'uplink.batch', body: { items: [accessItem(1, g.s.doorA), accessItem(1, g.s.doorA)] } }),
      ],
      [
        'the same item twice',
        'BATCH_DUPLICATE_ITEM',
        (g) => {
          const a = accessItem(1, g.s.doorA);
          return g.raw({ type: 'uplink.batch', body: { items: [a, { ...a, seq: 2 }] } });
        },
      ],
      [
        'a resync.request item (never batched)',
        'BATCH_TYPE_NOT_ALLOWED',
        (g) =>
          g.raw({
            type: 'uplink.batch',
            body: {
              items: [
                accessItem(1, g.s.doorA),
                {
                  type: 'resync.request',
                  seq: 2,
                  jti: newMessageId(),
                  cid: newCorrelationId(),
                  body: { requestId: newId(), lastAppliedSeq: 0, reason: 'gap' },
                },
              ],
            },
          }),
      ],
      [
        'a batch inside a batch',
        'BATCH_TYPE_NOT_ALLOWED',
        (g) =>
          g.raw({
            type: 'uplink.batch',
            body: {
              items: [
                accessItem(1, g.s.doorA),
                { type: 'uplink.batch', seq: 2, jti: newMessageId(), cid: newCorrelationId(), body: { items: [] } },
              ],
            },
          }),
      ],
      [
        'an item its own schema refuses (a decision code that does not exist)',
        'BATCH_ITEM_INVALID',
        (g) => {
          const bad = accessItem(2, g.s.doorA);
          (bad.body as { code: string }).code = 'OPEN_SESAME';
          return g.raw({ type: 'uplink.batch', body: { items: [accessItem(1, g.s.doorA), bad, accessItem(3, g.s.doorA)] } });
        },
      ],
      [
        'an item with an unknown field',
        'BATCH_ITEM_INVALID',
        (g) => {
          const bad = accessItem(1, g.s.doorA);
          (bad.body as Record<string, unknown>).extra = 1;
          return g.raw({ type: 'uplink.batch', body: { items: [bad, accessItem(2, g.s.doorA)] } });
        },
      ],
      [
        'more items than the bound',
        'SCHEMA_INVALID',
        (g) => g.raw({ type: 'uplink.batch', body: { items: Array.from({ length: 101 }, (_, i) => accessItem(i + 1, g.s.doorA)) } }),
      ],
      ['no items', 'SCHEMA_INVALID', (g) => g.raw({ type: 'uplink.batch', body: { items: [] } })],
      [
        'a seq on the envelope',
        'SCHEMA_INVALID',
        (g) => g.raw({ type: 'uplink.batch', seq: 1, body: { items: [accessItem(1, g.s.doorA), accessItem(2, g.s.doorA)] } }),
      ],
      [
        'a forged issuer (signed with the gateway key, claiming another gateway)',
        'WRONG_ISSUER',
        (g) => g.raw({ type: 'uplink.batch', iss: 'gw-other', body: { items: [accessItem(1, g.s.doorA), accessItem(2, g.s.doorA)] } }),
      ],
      [
        "another gateway's key on this gateway's topic",
        'UNKNOWN_KID',
        async (g) => {
          const other = await seed(deps(t.db, g.clock));
          return Buffer.from(
            await signRaw(other.pair, {
              iss: g.s.gatewayId,
              aud: 'tobira-cloud',
              type: 'uplink.batch',
              body: { items: [accessItem(1, g.s.doorA)] },
            }),
          );
        },
      ],
      [
        'a body over 64 KiB',
        'TOO_LARGE',
        (g) => {
          const status = (seq: number): Item => ({
            type: 'gateway.status',
            seq,
            jti: newMessageId(),
            cid: newCorrelationId(),
            body: {
              mode: 'normal',
              appliedSeq: 0,
              leaseExpiresAt: null,
              outboxDepth: 0,
              locks: Array.from({ length: 256 }, (_, i) => ({
                lockId: `lock-${i}-${'x'.repeat(40)}`,
                online: true,
                bolt: 'locked',
                door: 'closed',
                battery: 90,
                at: T0,
              })),
            },
          });
          return g.raw({ type: 'uplink.batch', body: { items: [accessItem(1, g.s.doorA), status(2), status(3)] } });
        },
      ],
    ];

    it.each(cases)('%s: %s', async (_name, code, make) => {
      const g = await setup();
      await g.inbox.handle(g.topic, await make(g));
      expect(await g.rejected()).toEqual([code]);
      expect(await g.audit()).toEqual([]);
      expect(await g.inboxRows()).toEqual([]);
      expect(await g.acked()).toBe(0);
      // the gateway's honest batch afterwards is applied as usual
      await g.inbox.handle(g.topic, await g.batch([accessItem(1, g.s.doorA), accessItem(2, g.s.doorA)]));
      expect(await g.audit()).toEqual([1, 2]);
    });

    it('signMessage refuses to sign such a batch: the gateway never sends what the cloud would refuse', async () => {
      const g = await setup();
      await expect(g.batch([accessItem(1, g.s.doorA), accessItem(3, g.s.doorA)])).rejects.toThrow(/BATCH_SEQ_NOT_CONSECUTIVE/);
    });
  });
});
