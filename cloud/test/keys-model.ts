import fc from 'fast-check';
import { asGatewayId, asKeyId, newCorrelationId, type RevokeReason } from '@tobira/shared';
import { expect } from 'vitest';
import { crashAt, SimulatedCrash } from '../src/app/crash.js';
import { getKey, issueKey, listKeyHistory, recordGatewayReport, revokeKey } from '../src/app/keys.js';
import type { Db } from '../src/adapters/db/db.js';
import { DAY, T0, deps, seed } from './helpers.js';

/**
 * A model-based test of the key verbs against a real database:
 * issue, revoke, deliver (gateway ack of the newest message), duplicate or
 * late acks of older versions, and crashes inside the verb transaction. After
 * every command the database must equal the model.
 */
type Status = 'issuing' | 'active' | 'revoking' | 'revoked' | 'failed';
interface Model {
  keys: Map<number, { status: Status; version: number; transitions: number }>;
  messages: number;
}
interface Real {
  db: Db;
  d: ReturnType<typeof deps>;
  s: Awaited<ReturnType<typeof seed>>;
  id: (i: number) => string;
}

type Cmd = fc.AsyncCommand<Model, Real>;

async function check(m: Model, r: Real, i: number) {
  const k = await getKey(r.d, r.id(i));
  const mk = m.keys.get(i);
  if (!mk) {
    expect(k).toBeNull();
    return;
  }
  expect({ status: k?.status, version: k?.version }).toEqual({ status: mk.status, version: mk.version });
  expect(await listKeyHistory(r.d, r.id(i))).toHaveLength(mk.transitions);
  const seqs = (await r.db.query<{ seq: number }>('SELECT seq FROM outbox WHERE gateway_id = $1 ORDER BY seq', [r.s.gatewayId])).rows.map(
    (x) => x.seq,
  );
  expect(seqs).toEqual(Array.from({ length: m.messages }, (_, j) => j + 1));
}

class Issue implements Cmd {
  constructor(readonly i: number) {}
  check = () => true;
  async run(m: Model, r: Real) {
    const o = await issueKey(r.d, {
      keyId: r.id(this.i),
      personId: r.s.personId,
      doors: [r.s.doorA],
      credential: { type: 'pin', value: String(300000 + this.i) },
      validFrom: T0,
      validUntil: T0 + DAY,
    });
    if (!m.keys.has(this.i)) {
      expect(o.status).toBe('applied');
      m.keys.set(this.i, { status: 'issuing', version: 1, transitions: 1 });
      m.messages++;
    } else expect(o).toMatchObject({ status: 'noop', code: 'KEY_ALREADY_ISSUED' });
    await check(m, r, this.i);
  }
  toString = () => `issue(${this.i})`;
}

class Revoke implements Cmd {
  constructor(
    readonly i: number,
    readonly reason: RevokeReason,
    readonly crash: boolean,
  ) {}
  check = () => true;
  async run(m: Model, r: Real) {
    const mk = m.keys.get(this.i);
    if (this.crash) {
      const crashing = deps(r.db, r.d.clock, { crash: crashAt(['afterOutboxInsertBeforeCommit']) });
      const p = revokeKey(crashing, { keyId: r.id(this.i), reason: this.reason });
      if (mk && (mk.status === 'issuing' || mk.status === 'active')) await expect(p).rejects.toBeInstanceOf(SimulatedCrash);
      else await p;
    } else {
      const o = await revokeKey(r.d, { keyId: r.id(this.i), reason: this.reason });
      if (!mk) expect(o).toMatchObject({ status: 'refused', code: 'KEY_NOT_FOUND' });
      else if (mk.status === 'issuing' || mk.status === 'active') {
        expect(o).toMatchObject({ status: 'applied', code: 'KEY_REVOKE_QUEUED' });
        mk.status = 'revoking';
        mk.version++;
        mk.transitions++;
        m.messages++;
      } else expect(o).toMatchObject({ status: 'noop', code: 'KEY_ALREADY_REVOKED' });
    }
    await check(m, r, this.i);
  }
  toString = () => `revoke(${this.i}, ${this.reason}${this.crash ? ', crash' : ''})`;
}

class Ack implements Cmd {
  /** `back` = how many versions older than the newest the ack names (0 = newest; >0 = a late or duplicate ack). */
  constructor(
    readonly i: number,
    readonly back: number,
    readonly refused: boolean,
  ) {}
  check = (m: Readonly<Model>) => m.keys.has(this.i);
  async run(m: Model, r: Real) {
    const mk = m.keys.get(this.i);
    if (!mk) return;
    const version = mk.version - this.back;
    if (version < 1) return;
    const o = await recordGatewayReport(r.d, {
      keyId: asKeyId(r.id(this.i)),
      gatewayId: asGatewayId(r.s.gatewayId),
      keyVersion: version,
      result: this.refused ? 'refused' : 'applied',
      code: 'X',
      cid: newCorrelationId(),
    });
    if (version === mk.version && o.status === 'applied') {
      mk.status = mk.status === 'issuing' ? (this.refused ? 'failed' : 'active') : 'revoked';
      mk.transitions++;
    } else if (version !== mk.version) {
      expect(o).toMatchObject({ status: 'noop', code: 'REPORT_IGNORED' });
    }
    await check(m, r, this.i);
  }
  toString = () => `ack(${this.i}, -${this.back}${this.refused ? ', refused' : ''})`;
}

export async function runKeyModel(db: Db): Promise<void> {
  const idx = fc.integer({ min: 0, max: 2 });
  const commands = [
    idx.map((i) => new Issue(i)),
    fc
      .tuple(idx, fc.constantFrom<RevokeReason>('staff_revoked', 'credential_lost'), fc.boolean())
      .map(([i, reason, crash]) => new Revoke(i, reason, crash)),
    fc.tuple(idx, fc.integer({ min: 0, max: 1 }), fc.boolean()).map(([i, back, refused]) => new Ack(i, back, refused)),
  ];
  let run = 0;
  await fc.assert(
    fc.asyncProperty(fc.commands(commands, { maxCommands: 15 }), async (cmds) => {
      const d = deps(db);
      const s = await seed(d);
      const prefix = `m${++run}-${s.u}`;
      await fc.asyncModelRun(
        () => ({ model: { keys: new Map(), messages: 0 }, real: { db, d, s, id: (i: number) => `${prefix}-k${i}` } }),
        cmds,
      );
    }),
    { numRuns: 25 },
  );
}
