import { newId } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { enterVerb, pgErrorCode, withVerb, type Db, type Tx } from '../src/adapters/db/db.js';
import { migrate } from '../src/adapters/db/migrate.js';
import { VERB_GUARD_SQLSTATE, loadVerbGuardRows, verbGuardRows, type VerbGuardRows } from '../src/adapters/db/verb-guards.js';
import { issueKey, revokeKey } from '../src/app/keys.js';
import { KEY_TRANSITIONS } from '../src/domain/key-states.js';
import { MEMBERSHIP_TRANSITIONS } from '../src/domain/membership-states.js';
import { MODE_REQUEST_TRANSITIONS } from '../src/domain/mode-requests.js';
import { PAYMENT_TRANSITIONS, REFUND_TRANSITIONS, STAY_TRANSITIONS } from '../src/domain/stay-states.js';
import { UPLINK_KEY_ROTATION_TRANSITIONS } from '../src/domain/uplink-keys.js';
import { STATUS_GUARDS, VALUE_GUARDS } from '../src/domain/verb-guards.js';
import { WALK_IN_TRANSITIONS } from '../src/domain/walk-ins.js';
import { DAY, T0, deps, openTestDb, seed, testLog, type TestDb } from './helpers.js';

/**
 * I4 in the database: the verb guard (migration `verb_guards`) against the
 * code's tables (`domain/verb-guards.ts`), on both cloud databases. The
 * database holds exactly the code's moves and writers; and for every guarded
 * table a write of a guarded column outside a verb, or under a verb that may
 * not make that move, is refused with TB401 naming table, column, verb and
 * move, while the verb that may make it passes.
 */

const moveKey = (m: VerbGuardRows['moves'][number]) => `${m.table}.${m.column}: ${m.verb} ${m.from ?? '—'} -> ${m.to}`;
const writerKey = (w: VerbGuardRows['writers'][number]) => `${w.table}.${w.column}: ${w.verb}`;
const columnKey = (c: VerbGuardRows['columns'][number]) => `${c.table}.${c.column} (${c.kind})`;

/** What one side has and the other lacks, by kind: the agreement test prints exactly these lines. */
function diff(code: VerbGuardRows, db: VerbGuardRows) {
  const missing = <T>(a: readonly T[], b: readonly T[], key: (x: T) => string) => {
    const have = new Set(b.map(key));
    return a
      .map(key)
      .filter((k) => !have.has(k))
      .sort();
  };
  return {
    columnsMissingInDb: missing(code.columns, db.columns, columnKey),
    columnsOnlyInDb: missing(db.columns, code.columns, columnKey),
    movesMissingInDb: missing(code.moves, db.moves, moveKey),
    movesOnlyInDb: missing(db.moves, code.moves, moveKey),
    writersMissingInDb: missing(code.writers, db.writers, writerKey),
    writersOnlyInDb: missing(db.writers, code.writers, writerKey),
  };
}
const AGREE = {
  columnsMissingInDb: [],
  columnsOnlyInDb: [],
  movesMissingInDb: [],
  movesOnlyInDb: [],
  writersMissingInDb: [],
  writersOnlyInDb: [],
};

describe('the verb-guard tables of the code', () => {
  it.each([
    ['keys', KEY_TRANSITIONS.flatMap((r) => r.from.map((f) => [f, r.to] as const))],
    ['stays', STAY_TRANSITIONS.flatMap((r) => r.from.map((f) => [f, r.to] as const))],
    ['payments', PAYMENT_TRANSITIONS.flatMap((r) => r.from.map((f) => [f, r.to] as const))],
    ['refunds', REFUND_TRANSITIONS.flatMap((r) => r.from.map((f) => [f, r.to] as const))],
    ['walk_ins', WALK_IN_TRANSITIONS.flatMap((r) => r.from.map((f) => [f, r.to] as const))],
    ['memberships', MEMBERSHIP_TRANSITIONS.flatMap((r) => r.from.map((f) => [f, r.to] as const))],
    ['mode_requests', MODE_REQUEST_TRANSITIONS.map((r) => [r.from, r.to] as const)],
    ['gateway_uplink_key_rotations', UPLINK_KEY_ROTATION_TRANSITIONS.map((r) => [r.from === '—' ? null : r.from, r.to] as const)],
  ] as const)('give every move of the %s state table a verb, and no move the table lacks', (table, tableMoves) => {
    const guard = STATUS_GUARDS.find((g) => g.table === table);
    if (!guard) throw new Error(`no status guard for ${table}`);
    const allowed = new Set(guard.moves.map((m) => `${m.from ?? '—'} -> ${m.to}`));
    const withoutVerb = tableMoves.map(([f, to]) => `${f ?? '—'} -> ${to}`).filter((m) => !allowed.has(m));
    expect(withoutVerb).toEqual([]);
    // what the guard allows beyond single table rows: the booking's insert of a payment, a chain's end, Stripe's refunds
    const single = new Set(tableMoves.map(([f, to]) => `${f ?? '—'} -> ${to}`));
    const extra = [...allowed].filter((m) => !single.has(m)).sort();
    const extras: Record<string, string[]> = {
      payments: ['— -> requires_payment'],
      stays: ['confirmed -> checked_out'],
      // a refund made in Stripe directly is inserted at Stripe's status, and a succeeded one may fail there later
      refunds: ['succeeded -> failed', '— -> failed', '— -> succeeded'],
    };
    expect(extra).toEqual(extras[table] ?? []);
  });

  it('list each guarded column once, and no value column without a table that also guards a status', () => {
    const all = [...STATUS_GUARDS, ...VALUE_GUARDS].map((g) => `${g.table}.${g.column}`);
    expect(all.length).toBe(new Set(all).size);
    const statusTables = new Set(STATUS_GUARDS.map((g) => g.table));
    expect(VALUE_GUARDS.filter((g) => !statusTables.has(g.table))).toEqual([]);
  });
});

describe.each(pgBackends())('verb guards on %s', (pgBackend) => {
  let t: TestDb;
  beforeAll(async () => {
    t = await openTestDb(pgBackend);
  });
  afterAll(async () => t?.close());

  describe('the database and the code', () => {
    it('hold exactly the same moves, writers and guarded columns after the migrations', async () => {
      expect(diff(verbGuardRows(), await loadVerbGuardRows(t.db))).toEqual(AGREE);
      expect(verbGuardRows().moves.length).toBeGreaterThan(60);
    });

    it('every guarded table has the verb_guard trigger, and every guarded column exists', async () => {
      const tables = [...new Set(verbGuardRows().columns.map((c) => c.table))].sort();
      const r = await t.db.query<{ table_name: string }>(
        `SELECT c.relname AS table_name FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid JOIN pg_proc p ON p.oid = tg.tgfoid
          WHERE p.proname = 'verb_guard' AND NOT tg.tgisinternal AND (tg.tgtype & 4) <> 0 AND (tg.tgtype & 16) <> 0`,
      );
      expect(r.rows.map((x) => x.table_name).sort()).toEqual(tables);
      const cols = await t.db.query<{ c: string }>(
        `SELECT table_name || '.' || column_name AS c FROM information_schema.columns WHERE table_schema = current_schema()`,
      );
      const have = new Set(cols.rows.map((x) => x.c));
      expect(verbGuardRows().columns.filter((c) => !have.has(`${c.table}.${c.column}`))).toEqual([]);
    });

    it('a row the code does not have is named by the comparison, and the next start puts the tables back', async () => {
      await t.db.query(`INSERT INTO verb_moves VALUES ('stays', 'status', 'revokeKey', 'confirmed', 'cancelled')`);
      await t.db.query(`DELETE FROM verb_columns WHERE table_name = 'payments' AND column_name = 'amount_received'`);
      expect(diff(verbGuardRows(), await loadVerbGuardRows(t.db))).toEqual({
        ...AGREE,
        movesOnlyInDb: ['stays.status: revokeKey confirmed -> cancelled'],
        writersMissingInDb: ['payments.amount_received: settlePayment'],
      });
      await migrate(t.db, testLog, T0);
      expect(diff(verbGuardRows(), await loadVerbGuardRows(t.db))).toEqual(AGREE);
    });

    it('a database that a newer cloud migrated keeps its verb guards when an older one starts', async () => {
      await t.db.query(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, 'from_a_newer_cloud', 0)`);
      await t.db.query(`INSERT INTO verb_moves VALUES ('stays', 'status', 'newerVerb', 'pending', 'cancelled')`);
      try {
        await migrate(t.db, testLog, T0);
        expect(diff(verbGuardRows(), await loadVerbGuardRows(t.db)).movesOnlyInDb).toEqual([
          'stays.status: newerVerb pending -> cancelled',
        ]);
      } finally {
        await t.db.query('DELETE FROM schema_migrations WHERE version = 9999');
        await migrate(t.db, testLog, T0);
      }
      expect(diff(verbGuardRows(), await loadVerbGuardRows(t.db))).toEqual(AGREE);
    });
  });

  // ---------------------------------------------------------------- one row of every guarded table

  interface Rows {
    keyId: string;
    stayId: string;
    paymentId: string;
    refundId: string;
    walkInId: string;
    membershipId: string;
    modeJti: string;
    rotationId: string;
  }

  const as = <T>(verb: string | null, fn: (tx: Tx) => Promise<T>) =>
    t.db.transaction(async (tx) => {
      if (verb !== null) await enterVerb(tx, verb);
      return fn(tx);
    });

  async function rows(db: Db): Promise<Rows> {
    const d = deps(db);
    const s = await seed(d);
    const u = s.u;
    const key = await issueKey(d, {
      personId: s.personId,
      doors: [s.doorA],
      credential: { type: 'pin', value: '123456' },
      validFrom: T0,
      validUntil: T0 + DAY,
    });
    if (key.status !== 'applied') throw new Error(`key: ${key.code}`);
    const ids: Rows = {
      keyId: key.state.id,
      stayId: `st-${u}`,
      paymentId: `pay-${u}`,
      refundId: `rf-${u}`,
      walkInId: `wi-${u}`,
      membershipId: `mb-${u}`,
      modeJti: `jti-${u}`,
      rotationId: `rot-${u}`,
    };
    await db.query(`INSERT INTO rooms (id, site_id, name, created_at) VALUES ($1, $2, 'R', 0)`, [`room-${u}`, s.siteId]);
    await db.query(
      `INSERT INTO plans (id, site_id, name, amount, currency, billing_interval, grace_seconds, created_at, updated_at)
       VALUES ($1, $2, 'P', 5000, 'jpy', 'month', 0, 0, 0)`,
      [`plan-${u}`, s.siteId],
    );
    const insert = (verb: string, sql: string, params: unknown[]) => as(verb, (tx) => tx.query(sql, params));
    await insert(
      'bookStay',
      `INSERT INTO stays (id, site_id, room_id, person_id, check_in, check_out, amount, currency, deposit, status, version, hold_until,
         last_code, cid, created_at, updated_at)
       VALUES ($1, $2, $3, $4, '2027-01-01', '2027-01-02', 10000, 'jpy', 0, 'pending', 1, 0, 'STAY_BOOKED', 'c', 0, 0)`,
      [ids.stayId, s.siteId, `room-${u}`, s.personId],
    );
    await insert(
      'bookStay',
      `INSERT INTO payments (id, stay_id, purpose, amount, currency, status, version, attempt, idempotency_key, last_code, cid, created_at, updated_at)
       VALUES ($1, $2, 'stay_balance', 10000, 'jpy', 'requires_payment', 1, 1, $1, 'X', 'c', 0, 0)`,
      [ids.paymentId, ids.stayId],
    );
    await insert(
      'cancelStay',
      `INSERT INTO refunds (id, payment_id, amount, currency, idempotency_key, cid, created_at, updated_at)
       VALUES ($1, $2, 1000, 'jpy', $1, 'c', 0, 0)`,
      [ids.refundId, ids.paymentId],
    );
    await insert(
      'createWalkIn',
      `INSERT INTO walk_ins (id, site_id, plan_id, person_id, day, quota_month, status, version, amount, currency, idempotency_key,
         hold_until, credential_type, credential_digest, last_code, cid, created_at, updated_at)
       VALUES ($1, $2, $3, $4, '2027-01-01', '2027-01', 'pending', 1, 2000, 'jpy', $1, 0, 'pin', 'd', 'X', 'c', 0, 0)`,
      [ids.walkInId, s.siteId, `plan-${u}`, s.personId],
    );
    await insert(
      'applyMembership',
      `INSERT INTO memberships (id, site_id, plan_id, person_id, status, version, idempotency_key, last_code, cid, created_at, updated_at)
       VALUES ($1, $2, $3, $4, 'applied', 1, $1, 'X', 'c', 0, 0)`,
      [ids.membershipId, s.siteId, `plan-${u}`, s.personId],
    );
    await insert(
      'requestMode',
      `INSERT INTO mode_requests (request_id, gateway_id, site_id, mode, passage, requested_by, jti, seq, cid, requested_at)
       VALUES ($1, $2, $3, 'lockdown', '[]', 'x', $1, 1, 'c', 0)`,
      [ids.modeJti, s.gatewayId, s.siteId],
    );
    await insert(
      'rotateUplinkKey',
      `INSERT INTO gateway_uplink_key_rotations (id, gateway_id, status, old_kid, requested_by, cid, rotate_jti, rotate_seq, requested_at)
       VALUES ($1, $2, 'requested', 'k1', 'x', 'c', $1, 1, 0)`,
      [ids.rotationId, s.gatewayId],
    );
    return ids;
  }

  /** One guarded write per case: refused outside a verb and under `wrong`, passing under `right`. */
  interface Case {
    readonly table: string;
    readonly column: string;
    /** the move or value change, as the message names it */
    readonly move: string;
    readonly right: string;
    readonly wrong: string;
    readonly update: (ids: Rows) => readonly [string, readonly unknown[]];
  }

  const CASES: readonly Case[] = [
    {
      table: 'keys',
      column: 'status',
      move: 'issuing -> active',
      right: 'recordGatewayReport',
      wrong: 'revokeKey',
      update: (r) => [`UPDATE keys SET status = 'active' WHERE id = $1`, [r.keyId]],
    },
    {
      table: 'stays',
      column: 'status',
      move: 'pending -> confirmed',
      right: 'settlePayment',
      wrong: 'checkInStay',
      update: (r) => [`UPDATE stays SET status = 'confirmed' WHERE id = $1`, [r.stayId]],
    },
    {
      table: 'stays',
      column: 'amount',
      move: '10000 -> 1',
      right: '',
      wrong: 'bookStay',
      update: (r) => [`UPDATE stays SET amount = 1 WHERE id = $1`, [r.stayId]],
    },
    {
      table: 'payments',
      column: 'status',
      move: 'requires_payment -> processing',
      right: 'settlePayment',
      wrong: 'recordRefund',
      update: (r) => [`UPDATE payments SET status = 'processing' WHERE id = $1`, [r.paymentId]],
    },
    {
      table: 'payments',
      column: 'amount_received',
      move: '0 -> 10000',
      right: 'settlePayment',
      wrong: 'cancelStay',
      update: (r) => [`UPDATE payments SET amount_received = 10000 WHERE id = $1`, [r.paymentId]],
    },
    {
      table: 'payments',
      column: 'amount_refunded',
      move: '0 -> 1000',
      right: 'recordRefund',
      wrong: 'settlePayment',
      // the money has to be there first (amount_refunded <= amount_received)
      update: (r) => [`UPDATE payments SET amount_refunded = 1000 WHERE id = $1 AND amount_received >= 1000`, [r.paymentId]],
    },
    {
      table: 'payments',
      column: 'amount',
      move: '10000 -> 1',
      right: '',
      wrong: 'settlePayment',
      update: (r) => [`UPDATE payments SET amount = 1 WHERE id = $1`, [r.paymentId]],
    },
    {
      table: 'refunds',
      column: 'status',
      move: 'pending -> failed',
      right: 'noteRefundError',
      // recordRefund may make it too: a refund Stripe itself failed
      wrong: 'settlePayment',
      update: (r) => [`UPDATE refunds SET status = 'failed' WHERE id = $1`, [r.refundId]],
    },
    {
      table: 'refunds',
      column: 'amount',
      move: '1000 -> 999999',
      right: '',
      wrong: 'cancelStay',
      update: (r) => [`UPDATE refunds SET amount = 999999 WHERE id = $1`, [r.refundId]],
    },
    {
      table: 'walk_ins',
      column: 'status',
      move: 'pending -> failed',
      right: 'failWalkIn',
      wrong: 'cancelWalkIn',
      update: (r) => [`UPDATE walk_ins SET status = 'failed' WHERE id = $1`, [r.walkInId]],
    },
    {
      table: 'walk_ins',
      column: 'amount_received',
      move: '0 -> 2000',
      right: 'settleWalkIn',
      wrong: 'failWalkIn',
      update: (r) => [`UPDATE walk_ins SET amount_received = 2000 WHERE id = $1`, [r.walkInId]],
    },
    {
      table: 'walk_ins',
      column: 'quota_returned',
      move: 'false -> true',
      right: 'failWalkIn',
      wrong: 'createWalkIn',
      update: (r) => [`UPDATE walk_ins SET quota_returned = true WHERE id = $1`, [r.walkInId]],
    },
    {
      table: 'walk_ins',
      column: 'amount',
      move: '2000 -> 1',
      right: '',
      wrong: 'settleWalkIn',
      update: (r) => [`UPDATE walk_ins SET amount = 1 WHERE id = $1`, [r.walkInId]],
    },
    {
      table: 'memberships',
      column: 'status',
      move: 'applied -> active',
      right: 'observeSubscription',
      wrong: 'approveMembership',
      update: (r) => [`UPDATE memberships SET status = 'active' WHERE id = $1`, [r.membershipId]],
    },
    {
      table: 'memberships',
      column: 'suspended',
      move: 'false -> true',
      right: 'suspendAccess',
      wrong: 'approveMembership',
      update: (r) => [`UPDATE memberships SET suspended = true WHERE id = $1`, [r.membershipId]],
    },
    {
      table: 'memberships',
      column: 'subscription_id',
      move: 'null -> sub_x',
      right: 'approveMembership',
      wrong: 'observeSubscription',
      update: (r) => [`UPDATE memberships SET subscription_id = 'sub_x' WHERE id = $1`, [r.membershipId]],
    },
    {
      table: 'memberships',
      column: 'stripe_customer_id',
      move: 'null -> cus_x',
      right: 'approveMembership',
      wrong: 'endMembership',
      update: (r) => [`UPDATE memberships SET stripe_customer_id = 'cus_x' WHERE id = $1`, [r.membershipId]],
    },
    {
      table: 'memberships',
      column: 'cancel_at_period_end',
      move: 'false -> true',
      right: 'endMembership',
      wrong: 'observeSubscription',
      update: (r) => [`UPDATE memberships SET cancel_at_period_end = true WHERE id = $1`, [r.membershipId]],
    },
    {
      table: 'mode_requests',
      column: 'status',
      move: 'pending -> refused',
      right: 'settleModeRequest',
      wrong: 'requestMode',
      update: (r) => [`UPDATE mode_requests SET status = 'refused', settled_at = 1 WHERE jti = $1`, [r.modeJti]],
    },
    {
      table: 'gateway_uplink_key_rotations',
      column: 'status',
      move: 'requested -> failed',
      right: 'applyUplinkKeyProposal',
      wrong: 'activateUplinkKey',
      update: (r) => [`UPDATE gateway_uplink_key_rotations SET status = 'failed' WHERE id = $1`, [r.rotationId]],
    },
  ];

  async function refusal(
    p: Promise<unknown>,
  ): Promise<{ code: string | undefined; message: string; table: string | undefined; column: string | undefined }> {
    try {
      await p;
    } catch (e) {
      const err = e as { message: string; table?: string; column?: string };
      return { code: pgErrorCode(e), message: err.message, table: err.table, column: err.column };
    }
    throw new Error('the write was not refused');
  }

  describe.each(CASES.map((c) => [`${c.table}.${c.column}`, c] as const))('%s', (_name, c) => {
    let ids: Rows;
    beforeAll(async () => {
      ids = await rows(t.db);
      // a refund needs the money first, received by the verb that records it
      if (c.column === 'amount_refunded')
        await as('settlePayment', (tx) => tx.query('UPDATE payments SET amount_received = 10000 WHERE id = $1', [ids.paymentId]));
    });
    const run = (verb: string | null) => {
      const [sql, params] = c.update(ids);
      return as(verb, (tx) => tx.query(sql, params));
    };

    it('is refused by a direct UPDATE, naming table, column and move', async () => {
      const r = await refusal(run(null));
      expect(r.code).toBe(VERB_GUARD_SQLSTATE);
      expect(r.message).toContain(`verb guard: ${c.table}.${c.column} ${c.move} is not`);
      expect(r.message).toContain('(none: tobira.verb unset)');
      expect({ table: r.table, column: r.column }).toEqual({ table: c.table, column: c.column });
    });

    it('is refused under a verb that may not write it', async () => {
      const r = await refusal(run(c.wrong));
      expect(r.code).toBe(VERB_GUARD_SQLSTATE);
      expect(r.message).toMatch(
        new RegExp(`^verb guard: ${c.table}\\.${c.column} .* verb ${c.wrong} \\(verbs that may .*: (.*, )?${c.right || 'none'}\\b`),
      );
    });

    it(c.right === '' ? 'is written by no verb once the row exists' : 'passes under the verb that may write it', async () => {
      if (c.right === '') {
        for (const g of VALUE_GUARDS.filter((v) => v.table === c.table && v.column === c.column)) expect(g.verbs).toEqual([]);
        const r = await refusal(run('settlePayment'));
        expect(r.code).toBe(VERB_GUARD_SQLSTATE);
        expect(r.message).toContain('not written by verb settlePayment (verbs that may write it: none, it is set at insert only)');
        return;
      }
      const r = await run(c.right);
      expect(r.rowCount).toBe(1);
    });
  });

  it('names the move and the verbs that may make it in the refusal', async () => {
    const ids = await rows(t.db);
    const r = await refusal(as('revokeKey', (tx) => tx.query(`UPDATE stays SET status = 'confirmed' WHERE id = $1`, [ids.stayId])));
    expect(r.message).toBe(
      'verb guard: stays.status pending -> confirmed is not a move of verb revokeKey (verbs that may make it: settlePayment)',
    );
    const m = await refusal(as('cancelStay', (tx) => tx.query('UPDATE payments SET amount_received = 5 WHERE id = $1', [ids.paymentId])));
    expect(m.message).toBe(
      'verb guard: payments.amount_received 0 -> 5 is not written by verb cancelStay (verbs that may write it: settlePayment)',
    );
  });

  it('refuses an insert under a verb that does not create the row, and a move the table does not have under any verb', async () => {
    const ids = await rows(t.db);
    const r = await refusal(
      as('cancelStay', (tx) =>
        tx.query(
          `INSERT INTO memberships (id, site_id, plan_id, person_id, status, version, idempotency_key, last_code, cid, created_at, updated_at)
           SELECT $1, site_id, plan_id, person_id, 'applied', 1, $1, 'X', 'c', 0, 0 FROM memberships WHERE id = $2`,
          [`mb-${newId()}`, ids.membershipId],
        ),
      ),
    );
    expect(r.message).toBe(
      'verb guard: memberships.status — -> applied is not a move of verb cancelStay (verbs that may make it: applyMembership)',
    );
    // applied → ended is in no row: not even endMembership may make it
    const e = await refusal(
      as('endMembership', (tx) =>
        tx.query(`UPDATE memberships SET status = 'ended', ended_at = 1, end_reason = 'force_cancel' WHERE id = $1`, [ids.membershipId]),
      ),
    );
    expect(e.message).toBe(
      'verb guard: memberships.status applied -> ended is not a move of verb endMembership (verbs that may make it: none)',
    );
  });

  it("checks a verb run inside another verb's transaction as itself, then the caller as the caller again", async () => {
    const ids = await rows(t.db);
    const verbNow = async (tx: Tx) => (await tx.query<{ v: string }>("SELECT current_setting('tobira.verb', true) AS v")).rows[0]?.v;
    await t.db.transaction(async (tx) => {
      await enterVerb(tx, 'settlePayment');
      expect(await withVerb(tx, 'cancelStay', () => verbNow(tx))).toBe('cancelStay');
      expect(await verbNow(tx)).toBe('settlePayment');
      // a key verb in the caller's transaction, through a savepoint and directly
      const d = { ...deps(t.db), db: tx };
      const s = await revokeKey({ ...d, inCallerTransaction: true }, { keyId: ids.keyId, reason: 'staff_revoked' });
      expect(s.status).toBe('applied');
      expect(await verbNow(tx)).toBe('settlePayment');
      const again = await revokeKey(d, { keyId: ids.keyId, reason: 'staff_revoked' });
      expect(again.code).toBe('KEY_ALREADY_REVOKED');
      expect(await verbNow(tx)).toBe('settlePayment');
      // so the caller's own move passes, which the key verb's name would not
      expect((await tx.query(`UPDATE stays SET status = 'confirmed' WHERE id = $1`, [ids.stayId])).rowCount).toBe(1);
    });
  });

  it('keeps the version rule: it changes only inside a verb and never shrinks', async () => {
    const ids = await rows(t.db);
    expect((await refusal(t.db.query('UPDATE stays SET version = 2 WHERE id = $1', [ids.stayId]))).message).toBe(
      'stays.version may only change inside a verb (tobira.verb unset)',
    );
    await as('settlePayment', (tx) => tx.query('UPDATE stays SET version = 3 WHERE id = $1', [ids.stayId]));
    expect((await refusal(as('settlePayment', (tx) => tx.query('UPDATE stays SET version = 2 WHERE id = $1', [ids.stayId])))).message).toBe(
      'stays.version may not shrink',
    );
  });

  it('leaves columns it does not guard alone, and a guarded column rewritten to its own value', async () => {
    const ids = await rows(t.db);
    expect(
      (await t.db.query(`UPDATE stays SET last_code = 'X', status = status, amount = amount WHERE id = $1`, [ids.stayId])).rowCount,
    ).toBe(1);
  });
});
