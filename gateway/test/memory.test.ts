import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  ManualClock,
  asKeyId,
  credentialDigest,
  newCorrelationId,
  newMessageId,
  newPairingSecret,
  type DownlinkMessage,
  type SiteMode,
} from '@tobira/shared';
import { pino } from 'pino';
import { openDatabase, type WritableDb } from '../src/adapters/sqlite/db.js';
import { consumeKey, dropActiveKeys, loadSlot, saveSlot } from '../src/adapters/sqlite/keyset.js';
import { setLockout, setSiteLockout, upsertLock } from '../src/adapters/sqlite/locks.js';
import { loadMemory, memoryAgainstDatabase, memoryLoaded } from '../src/adapters/sqlite/memory.js';
import { setPrivacy, writeSiteMode } from '../src/adapters/sqlite/modes.js';
import { enqueue, DEFAULT_OUTBOX_LIMITS } from '../src/adapters/sqlite/outbox.js';
import { markSeqConflict, raiseTimeFloor, readSettings, setLease, setMode, setSnapshotApplied } from '../src/adapters/sqlite/settings.js';
import { GatewayStore } from '../src/adapters/sqlite/store.js';
import { saveTrustedKeys } from '../src/adapters/sqlite/trusted-keys.js';
import { handleLockRequests, type AccessDeps } from '../src/app/access.js';
import { applyPending, type ApplyDeps } from '../src/app/apply.js';
import { TrustedTime, noCrash } from '../src/app/context.js';
import { applyGrant, applyRevoke } from '../src/domain/keyset.js';
import { createMetrics } from '../src/metrics.js';
import { T0, grant } from './fixtures.js';

/**
 * The in-memory decision state (adapters/sqlite/memory.ts) against SQLite:
 * after any sequence of writes — grants, revokes, re-signs, key set retires,
 * one-time consumptions, privacy on/off, lockouts, mode changes, decisions —
 * committed, rolled back by a throw after some writes, or rolled back to a
 * savepoint inside a transaction that commits, the memory equals a fresh load
 * from the database; a reopened handle rebuilds the same memory; and a
 * decision never opens with a key whose revoke (or one-time use) is committed.
 */

const PEPPER = newPairingSecret();
const LOCKS = ['lock-1', 'lock-2'] as const;
const pinOf = (k: number) => `${k}${k}${k}${k}${k}${k}`;
const digestOf = (k: number) => credentialDigest(PEPPER, 'pin', pinOf(k));

type Op =
  | { kind: 'grant'; key: number; version: number; oneTime: boolean; signer: 'kid-a' | 'kid-b' | null; offline: boolean }
  | { kind: 'revoke'; key: number; version: number }
  | { kind: 'trust'; kid: 'kid-a' | 'kid-b'; retired: boolean }
  | { kind: 'consume'; key: number }
  | { kind: 'privacy'; lock: number; on: boolean }
  | { kind: 'lockout'; lock: number; failures: number; until: number | null }
  | { kind: 'siteLockout'; failures: number; until: number | null }
  | { kind: 'mode'; mode: SiteMode; viaOrigin: boolean }
  | { kind: 'settings'; which: 'lease' | 'conflict' | 'floor' | 'snapshot' | 'enqueue' }
  | { kind: 'dropActive' }
  | { kind: 'pairLock' }
  | { kind: 'decide'; key: number; lock: number };

const keyNo = fc.integer({ min: 1, max: 3 });
const lockNo = fc.integer({ min: 0, max: 1 });
const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant('grant' as const),
      key: keyNo,
      version: fc.integer({ min: 1, max: 6 }),
      oneTime: fc.boolean(),
      signer: fc.constantFrom('kid-a' as const, 'kid-b' as const, null),
      offline: fc.boolean(),
    }),
  },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('revoke' as const), key: keyNo, version: fc.integer({ min: 1, max: 6 }) }) },
  fc.record({ kind: fc.constant('trust' as const), kid: fc.constantFrom('kid-a' as const, 'kid-b' as const), retired: fc.boolean() }),
  fc.record({ kind: fc.constant('consume' as const), key: keyNo }),
  fc.record({ kind: fc.constant('privacy' as const), lock: lockNo, on: fc.boolean() }),
  fc.record({
    kind: fc.constant('lockout' as const),
    lock: lockNo,
    failures: fc.integer({ min: 0, max: 5 }),
    until: fc.option(fc.integer({ min: T0 - 60_000, max: T0 + 60_000 })),
  }),
  fc.record({
    kind: fc.constant('siteLockout' as const),
    failures: fc.integer({ min: 0, max: 5 }),
    until: fc.option(fc.integer({ min: T0 - 60_000, max: T0 + 60_000 })),
  }),
  fc.record({ kind: fc.constant('mode' as const), mode: fc.constantFrom<SiteMode>('normal', 'lockdown'), viaOrigin: fc.boolean() }),
  fc.record({
    kind: fc.constant('settings' as const),
    which: fc.constantFrom('lease' as const, 'conflict' as const, 'floor' as const, 'snapshot' as const, 'enqueue' as const),
  }),
  fc.constant({ kind: 'dropActive' as const }),
  fc.constant({ kind: 'pairLock' as const }),
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('decide' as const), key: keyNo, lock: lockNo }) },
);

/** How a step's writes end. */
type Ending = 'commit' | 'throw' | 'savepointThrows' | 'autocommit' | 'decisionThenThrow';
const endingArb = fc.constantFrom<Ending>('commit', 'throw', 'savepointThrows', 'autocommit', 'decisionThenThrow');

class Injected extends Error {}

interface Rig {
  db: WritableDb;
  deps: AccessDeps;
  extraLocks: number;
  close(): void;
}

function openRig(path: string, clock: ManualClock): Rig {
  const db = openDatabase(path);
  const store = new GatewayStore(db);
  loadMemory(db);
  for (const l of LOCKS) upsertLock(db, l, 'door-1', T0);
  const time = new TrustedTime(clock, clock);
  // the restart is proven (a resync answer to our own request), so the lease counts
  time.asked('r');
  time.answered('r', T0);
  const deps: AccessDeps = {
    gatewayId: 'gw-mem',
    store,
    time,
    log: pino({ level: 'silent' }),
    metrics: createMetrics(),
    crash: noCrash,
    outboxWritten: () => {},
    access: {
      pepper: PEPPER,
      lockout: { limit: 3, cooldownSeconds: 60 },
      siteLockout: { limit: 5, windowSeconds: 600, cooldownSeconds: 300 },
      requestRate: { burst: 1_000_000, perSecond: 1_000_000 },
      holdMs: 1000,
      commandTtlMs: 10_000,
      pairingSecrets: new Map(LOCKS.map((l) => [l, newPairingSecret()])),
      offlineGraceSeconds: 300,
    },
    buckets: new Map(),
    storageLow: () => false,
  };
  return { db, deps, extraLocks: 0, close: () => db.close() };
}

let requestNo = 0;
/** Every decision code the property saw: it must have opened, and refused for revocation, use and signer retirement. */
const codesSeen = new Set<string>();

/** One write, through the adapter (or app) function that makes it in the gateway. */
function run(rig: Rig, op: Op, now: number): void {
  const { db } = rig;
  switch (op.kind) {
    case 'grant': {
      const keyId = `key-${op.key}`;
      const g = grant({
        keyId: asKeyId(keyId),
        version: op.version,
        credential: { type: 'pin', digest: digestOf(op.key) },
        offlineCapable: op.offline,
        ...(op.oneTime ? { oneTime: true as const } : {}),
      });
      const o = applyGrant(loadSlot(db, keyId), g);
      // a re-sign: the same grant again under another signer (re-sent before a retire) keeps the slot, notes the signer
      const slot = 'state' in o ? o.state : null;
      if (slot !== null) saveSlot(db, keyId, slot, `cid-${op.key}-${op.version}`, now, op.signer);
      return;
    }
    case 'revoke': {
      const keyId = `key-${op.key}`;
      const o = applyRevoke(loadSlot(db, keyId), { keyId: asKeyId(keyId), version: op.version, reason: 'staff_revoked' });
      if ('state' in o) saveSlot(db, keyId, o.state, null, now);
      return;
    }
    case 'trust':
      saveTrustedKeys(db, [
        {
          kid: op.kid,
          jwk: null,
          status: op.retired ? 'retired' : 'trusted',
          source: 'cloud',
          notBefore: null,
          addedAt: T0,
          retiredAt: op.retired ? now : null,
        },
      ]);
      return;
    case 'consume': {
      const k = loadSlot(db, `key-${op.key}`).key;
      if (k !== null) consumeKey(db, { keyId: `key-${op.key}`, version: k.version, lockId: 'lock-1', requestId: `c-${requestNo++}` }, now);
      return;
    }
    case 'privacy':
      setPrivacy(db, LOCKS[op.lock]!, op.on, now);
      return;
    case 'lockout':
      setLockout(db, LOCKS[op.lock]!, { failures: op.failures, lockedOutUntil: op.until }, now);
      return;
    case 'siteLockout':
      setSiteLockout(db, 'pin', { failures: op.failures, windowStart: now, lockedOutUntil: op.until }, now);
      return;
    case 'mode':
      if (op.viaOrigin) writeSiteMode(db, { mode: op.mode, origin: 'gateway', by: 'test', at: now, requestId: null });
      else setMode(db, op.mode);
      return;
    case 'settings':
      if (op.which === 'lease') setLease(db, now + 300_000);
      else if (op.which === 'conflict') markSeqConflict(db, now);
      else if (op.which === 'floor') raiseTimeFloor(db, now, now);
      else if (op.which === 'snapshot') setSnapshotApplied(db, readSettings(db).appliedSeq + 1);
      else enqueue(db, DEFAULT_OUTBOX_LIMITS, 'access.event', { note: 'x' } as never, 'cid', true, now);
      return;
    case 'dropActive':
      dropActiveKeys(db);
      return;
    case 'pairLock':
      upsertLock(db, `lock-extra-${rig.extraLocks++}`, 'door-2', now);
      return;
    case 'decide':
      decideAndCheck(rig, op.key, LOCKS[op.lock]!);
      return;
  }
}

/**
 * A PIN decision through the real path (handleLockRequests: its own
 * transaction, or a savepoint of the caller's). The check reads SQLite, not
 * the memory: an opening is only for a key whose row is active and, for a
 * one-time key, not consumed before this decision.
 */
function decideAndCheck(rig: Rig, key: number, lockId: string): void {
  const { db } = rig;
  const before = loadSlot(db, `key-${key}`).key;
  const consumedBefore = db.prepare('SELECT 1 FROM consumed_keys WHERE key_id = ?').get(`key-${key}`) !== undefined;
  const requestId = `r-${requestNo++}`;
  const [a] = handleLockRequests(rig.deps, [
    { lockId, payload: Buffer.from(JSON.stringify({ requestId, credential: { type: 'pin', value: pinOf(key) }, at: T0 })) },
  ]);
  if (a !== null && a !== undefined) codesSeen.add(a.decision.code);
  if (a?.decision.allowed === true) {
    expect(before?.status).toBe('active');
    if (before?.grant.oneTime === true) expect(consumedBefore).toBe(false);
  }
}

type Step = { ops: Op[]; ending: Ending; throwAfter: number };
const committed = (...ops: Op[]): Step => ({ ops, ending: 'commit', throwAfter: 0 });
const plainGrant = (key: number, extra: Partial<Extract<Op, { kind: 'grant' }>> = {}): Op => ({
  kind: 'grant',
  key,
  version: 1,
  oneTime: false,
  signer: null,
  offline: false,
  ...extra,
});
const decide = (key: number, lock = 0): Op => ({ kind: 'decide', key, lock });
/** One run per decision code: opened, revoked, used, signer retired, locked out, lockdown. */
const COVERING_EXAMPLES: [Step[], number][] = [
  [[committed(plainGrant(1), decide(1))], 0],
  [[committed(plainGrant(1), { kind: 'revoke', key: 1, version: 2 }), committed(decide(1))], 0],
  [[committed(plainGrant(2, { oneTime: true })), committed(decide(2)), committed(decide(2, 1))], 0],
  [[committed(plainGrant(3, { signer: 'kid-a' }), { kind: 'trust', kid: 'kid-a', retired: true }), committed(decide(3))], 0],
  [[committed(plainGrant(1), { kind: 'lockout', lock: 0, failures: 3, until: T0 + 60_000 }), committed(decide(1))], 0],
  [[committed(plainGrant(1), { kind: 'mode', mode: 'lockdown', viaOrigin: false }), committed(decide(1))], 0],
];

function expectInSync(db: WritableDb): void {
  const { memory, database } = memoryAgainstDatabase(db);
  expect(memory).not.toBeNull();
  expect(memory).toEqual(database);
}

describe('in-memory decision state, written through', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'tobira-memory-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('equals a fresh load from SQLite after any writes, commits, rollbacks and savepoint rollbacks, and after a reopen', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ ops: fc.array(opArb, { minLength: 1, maxLength: 5 }), ending: endingArb, throwAfter: fc.nat() }), {
          minLength: 1,
          maxLength: 14,
        }),
        fc.nat(),
        (steps, reopenAt) => {
          const path = join(dir, `g-${requestNo++}.sqlite`);
          const clock = new ManualClock(T0);
          let rig = openRig(path, clock);
          setLease(rig.db, T0 + 3_600_000);
          try {
            steps.forEach((step, i) => {
              if (i === reopenAt % steps.length) {
                // a restart: the new handle's memory is built from what was committed, and equals the old one's
                const { memory } = memoryAgainstDatabase(rig.db);
                rig.close();
                rig = openRig(path, clock);
                expect(memoryAgainstDatabase(rig.db).memory).toEqual(memory);
              }
              clock.advance(1000);
              const now = clock.now();
              const cut = step.throwAfter % (step.ops.length + 1);
              const all = () => step.ops.forEach((op) => run(rig, op, now));
              try {
                if (step.ending === 'autocommit') all();
                else if (step.ending === 'commit') rig.db.transaction(all).immediate();
                else if (step.ending === 'throw')
                  rig.db
                    .transaction(() => {
                      step.ops.slice(0, cut).forEach((op) => run(rig, op, now));
                      throw new Injected('after some writes');
                    })
                    .immediate();
                else if (step.ending === 'savepointThrows')
                  rig.db
                    .transaction(() => {
                      step.ops.slice(0, cut).forEach((op) => run(rig, op, now));
                      try {
                        rig.db.transaction(() => {
                          step.ops.slice(cut).forEach((op) => run(rig, op, now));
                          throw new Injected('in the savepoint');
                        })();
                      } catch (e) {
                        if (!(e instanceof Injected)) throw e;
                      }
                    })
                    .immediate();
                else
                  rig.db
                    .transaction(() => {
                      all();
                      // the decisions' own transaction committed as a savepoint; the enclosing one now fails
                      decideAndCheck(rig, 1, 'lock-1');
                      throw new Injected('after the decisions');
                    })
                    .immediate();
              } catch (e) {
                if (!(e instanceof Injected)) throw e;
              }
              expectInSync(rig.db);
            });
          } finally {
            rig.close();
          }
        },
      ),
      // the random runs follow examples that reach every decision code the check below asks for, so it holds on any seed
      { numRuns: 120, examples: COVERING_EXAMPLES },
    );
    for (const code of ['ALLOWED', 'KEY_REVOKED', 'KEY_USED', 'SIGNER_RETIRED', 'LOCKED_OUT', 'SITE_LOCKDOWN'])
      expect(codesSeen).toContain(code);
  });

  it('through the real inbox apply, with applies that fail and are retried: the memory follows every commit, and a revoked key never opens', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({ kind: fc.constantFrom<'grant' | 'revoke'>('grant', 'revoke'), key: keyNo, version: fc.integer({ min: 1, max: 4 }) }),
          {
            minLength: 1,
            maxLength: 10,
          },
        ),
        fc.array(fc.boolean(), { minLength: 1, maxLength: 20 }),
        (ops, failures) => {
          const clock = new ManualClock(T0);
          const rig = openRig(join(dir, `apply-${requestNo++}.sqlite`), clock);
          setLease(rig.db, T0 + 3_600_000);
          const deps: ApplyDeps = {
            ...rig.deps,
            options: { offlineGraceSeconds: 300, maxAttempts: 100, claimLeaseMs: 30_000, resyncIntervalMs: 0, uplinkAckTimeoutMs: 60_000 },
            resyncThrottle: { lastMono: Number.NEGATIVE_INFINITY },
            requestResync: () => {},
          };
          const access = {
            ...rig.deps,
            access: {
              ...rig.deps.access,
              lockout: { limit: 0, cooldownSeconds: 60 },
              siteLockout: { limit: 0, windowSeconds: 600, cooldownSeconds: 300 },
            },
          };
          let round = 0;
          const failing = {
            ...deps,
            beforeApply: () => {
              if (failures[round++ % failures.length] === true) throw new Injected('apply failed');
            },
          };
          try {
            ops.forEach((op, i) => {
              const keyId = asKeyId(`key-${op.key}`);
              const base = {
                jti: newMessageId(),
                iss: 'tobira-cloud',
                aud: 'gw-mem',
                iat: T0 / 1000,
                exp: T0 / 1000 + 3600,
                cid: newCorrelationId(),
                seq: i + 1,
              };
              const m: DownlinkMessage =
                op.kind === 'grant'
                  ? {
                      ...base,
                      type: 'key.grant',
                      body: { key: grant({ keyId, version: op.version, credential: { type: 'pin', digest: digestOf(op.key) } }) },
                    }
                  : { ...base, type: 'key.revoke', body: { keyId, version: op.version, reason: 'staff_revoked' } };
              rig.deps.store.insertInbox(m, T0);
              clock.advance(31_000); // a failed claim's lease runs out, so the row is tried again
              applyPending(failing);
              expectInSync(rig.db);
              for (const key of [1, 2, 3]) {
                const slot = loadSlot(rig.db, `key-${key}`);
                const [a] = handleLockRequests(access, [
                  {
                    lockId: 'lock-1',
                    payload: Buffer.from(
                      JSON.stringify({ requestId: `r-${requestNo++}`, credential: { type: 'pin', value: pinOf(key) }, at: T0 }),
                    ),
                  },
                ]);
                // what SQLite holds after the commit decides: active opens, anything else never does
                expect({ key, code: a!.decision.code, allowed: a!.decision.allowed }).toMatchObject({
                  key,
                  allowed: slot.key?.status === 'active',
                });
              }
            });
            applyPending(deps);
            expectInSync(rig.db);
            expect(readSettings(rig.db).appliedSeq).toBe(ops.length);
          } finally {
            rig.close();
          }
        },
      ),
      { numRuns: 40 },
    );
  });

  it('a revoke committed is never followed by an opening with that key, and a rolled-back revoke leaves the key opening', () => {
    const clock = new ManualClock(T0);
    const rig = openRig(join(dir, 'revoke.sqlite'), clock);
    setLease(rig.db, T0 + 3_600_000);
    const open = () => {
      const [a] = handleLockRequests(rig.deps, [
        {
          lockId: 'lock-1',
          payload: Buffer.from(JSON.stringify({ requestId: `r-${requestNo++}`, credential: { type: 'pin', value: pinOf(1) }, at: T0 })),
        },
      ]);
      return a!.decision;
    };
    run(rig, { kind: 'grant', key: 1, version: 1, oneTime: false, signer: 'kid-a', offline: false }, T0);
    expect(open()).toMatchObject({ allowed: true, code: 'ALLOWED' });
    // a revoke whose transaction fails after the write: the database keeps the key, so does the memory
    expect(() =>
      rig.db
        .transaction(() => {
          run(rig, { kind: 'revoke', key: 1, version: 1 }, T0);
          throw new Injected('apply failed after the revoke');
        })
        .immediate(),
    ).toThrow(Injected);
    expect(loadSlot(rig.db, 'key-1').key?.status).toBe('active');
    expect(open()).toMatchObject({ allowed: true });
    rig.db.transaction(() => run(rig, { kind: 'revoke', key: 1, version: 1 }, T0)).immediate();
    expect(open()).toMatchObject({ allowed: false, code: 'KEY_REVOKED' });
    // the retire of the key's signer, and a grant noted under no signer once any key was retired
    run(rig, { kind: 'grant', key: 2, version: 1, oneTime: false, signer: 'kid-a', offline: false }, T0);
    run(rig, { kind: 'trust', kid: 'kid-a', retired: true }, T0);
    const [b] = handleLockRequests(rig.deps, [
      {
        lockId: 'lock-1',
        payload: Buffer.from(JSON.stringify({ requestId: `r-${requestNo++}`, credential: { type: 'pin', value: pinOf(2) }, at: T0 })),
      },
    ]);
    expect(b!.decision).toMatchObject({ allowed: false, code: 'SIGNER_RETIRED' });
    expectInSync(rig.db);
    rig.close();
  });

  it('a one-time key opens once, also when both requests are in one batch, and the consumption survives a reopen', () => {
    const clock = new ManualClock(T0);
    const path = join(dir, 'once.sqlite');
    let rig = openRig(path, clock);
    setLease(rig.db, T0 + 3_600_000);
    run(rig, { kind: 'grant', key: 3, version: 1, oneTime: true, signer: null, offline: false }, T0);
    const req = (lockId: string) => ({
      lockId,
      payload: Buffer.from(JSON.stringify({ requestId: `r-${requestNo++}`, credential: { type: 'pin', value: pinOf(3) }, at: T0 })),
    });
    const answers = handleLockRequests(rig.deps, [req('lock-1'), req('lock-2')]);
    expect(answers.map((a) => a!.decision.code)).toEqual(['ALLOWED', 'KEY_USED']);
    rig.close();
    rig = openRig(path, clock);
    setLease(rig.db, T0 + 3_600_000);
    expect(handleLockRequests(rig.deps, [req('lock-1')])[0]!.decision.code).toBe('KEY_USED');
    expectInSync(rig.db);
    rig.close();
  });

  it('is not loaded for a handle until used, and a load inside a transaction that rolls back is dropped', () => {
    const path = join(dir, 'lazy.sqlite');
    const first = openDatabase(path);
    upsertLock(first, 'lock-1', 'door-1', T0);
    first.close();
    const db = openDatabase(path);
    expect(memoryLoaded(db)).toBe(false);
    // the guarded transaction() keeps better-sqlite3's shape: every variant carries the others and the handle
    type Variant = (() => number) & { database: unknown; default: Variant; deferred: Variant; immediate: Variant; exclusive: Variant };
    const t = db.transaction(() => 1) as unknown as Variant;
    expect([t.database, t.immediate.database, t.deferred.exclusive.database, t.default.database]).toEqual([db, db, db, db]);
    expect(t.deferred.immediate()).toBe(1);
    expect(() =>
      db
        .transaction(() => {
          setLease(db, T0 + 1000); // written before the memory exists
          expect(readSettings(db).leaseExpiresAt).toBe(T0 + 1000); // first read loads it, seeing the open transaction
          throw new Injected('rolled back');
        })
        .immediate(),
    ).toThrow(Injected);
    expect(memoryLoaded(db)).toBe(false);
    expect(readSettings(db).leaseExpiresAt).toBeNull();
    expectInSync(db);
    db.close();
  });
});
