import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ManualClock, asKeyId, newCorrelationId, newMessageId, newPairingSecret, type DownlinkMessage } from '@tobira/shared';
import { pino } from 'pino';
import { openDatabase } from '../src/adapters/sqlite/db.js';
import { GatewayStore } from '../src/adapters/sqlite/store.js';
import { handleLockRequests } from '../src/app/access.js';
import { applyPending, type ApplyDeps } from '../src/app/apply.js';
import { TrustedTime, noCrash } from '../src/app/context.js';
import { createMetrics } from '../src/metrics.js';
import { T0, grant } from './fixtures.js';

/**
 * Model-based: grants and revokes of a few keys, delivered through the real
 * SQLite inbox and writer in any order, with duplicates and replays, and a
 * restart (a fresh store on the same file) in between. Invariants: a key is
 * never active at or below a revoke the gateway has applied (acked), and once
 * every seq is delivered the key set is the model's.
 */
type Op = { kind: 'grant' | 'revoke'; key: number; version: number };

function withStore<T>(fn: (open: () => { store: GatewayStore; deps: ApplyDeps; close(): void }) => T): T {
  const dir = mkdtempSync(join(tmpdir(), 'tobira-model-'));
  const clock = new ManualClock(T0);
  const open = () => {
    const db = openDatabase(join(dir, 'g.sqlite'));
    const store = new GatewayStore(db);
    const deps: ApplyDeps = {
      gatewayId: 'gw-model',
      store,
      time: new TrustedTime(clock, clock),
      log: pino({ level: 'silent' }),
      metrics: createMetrics(),
      crash: noCrash,
      outboxWritten: () => {},
      options: { offlineGraceSeconds: 300, maxAttempts: 3, claimLeaseMs: 30_000, resyncIntervalMs: 0, uplinkAckTimeoutMs: 60_000 },
      resyncThrottle: { lastMono: Number.NEGATIVE_INFINITY },
      requestResync: () => {},
    };
    return { store, deps, close: () => db.close() };
  };
  try {
    return fn(open);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const message = (op: Op, seq: number): DownlinkMessage => {
  const base = {
    jti: newMessageId(),
    iss: 'tobira-cloud',
    aud: 'gw-model',
    iat: T0 / 1000,
    exp: T0 / 1000 + 3600,
    cid: newCorrelationId(),
    seq,
  };
  const keyId = asKeyId(`key-${op.key}`);
  return op.kind === 'grant'
    ? {
        ...base,
        type: 'key.grant',
        body: { key: grant({ keyId, version: op.version, credential: { type: 'pin', digest: String(op.key).padStart(43, 'A') } }) },
      }
    : { ...base, type: 'key.revoke', body: { keyId, version: op.version, reason: 'staff_revoked' } };
};

describe('inbox + key set, model-based', () => {
  it('never has a key active at or below an applied revoke, and converges to the model whatever the delivery', () => {
    const opArb = fc.record({
      kind: fc.constantFrom<'grant' | 'revoke'>('grant', 'revoke'),
      key: fc.integer({ min: 1, max: 3 }),
      version: fc.integer({ min: 1, max: 5 }),
    });
    fc.assert(
      fc.property(
        fc.array(opArb, { minLength: 1, maxLength: 10 }),
        fc.array(fc.nat(), { minLength: 1, maxLength: 30 }),
        fc.nat(),
        (ops, picks, restartAt) =>
          withStore((open) => {
            const msgs = ops.map((op, i) => message(op, i + 1));
            // Delivery: a random order with duplicates and replays, then everything once more (the cloud resends until acked).
            const delivery = [...picks.map((p) => msgs[p % msgs.length]!), ...msgs];
            let s = open();
            delivery.forEach((m, i) => {
              if (i === restartAt % delivery.length) {
                s.close();
                s = open();
              }
              s.store.insertInbox(m, T0);
              applyPending(s.deps);
              // Invariant: every applied revoke holds.
              const applied = s.store.settings().appliedSeq;
              for (const [idx, op] of ops.entries()) {
                if (op.kind !== 'revoke' || idx + 1 > applied) continue;
                const slot = s.store.loadSlot(`key-${op.key}`);
                if (slot.key?.status === 'active') expect(slot.key.version).toBeGreaterThan(op.version);
              }
            });
            expect(s.store.settings().appliedSeq).toBe(ops.length);
            for (const key of [1, 2, 3]) {
              const mine = ops.filter((o) => o.key === key);
              const maxGrant = Math.max(0, ...mine.filter((o) => o.kind === 'grant').map((o) => o.version));
              const maxRevoke = Math.max(0, ...mine.filter((o) => o.kind === 'revoke').map((o) => o.version));
              const slot = s.store.loadSlot(`key-${key}`);
              expect(slot.key?.status === 'active').toBe(maxGrant > maxRevoke);
            }
            // One ack per sequenced message, never more.
            const acks = s.store.db.prepare("SELECT count(*) AS n FROM outbox WHERE type = 'ack'").get() as { n: number };
            expect(acks.n).toBe(ops.length);
            s.close();
          }),
      ),
      { numRuns: 60 },
    );
  });
});

describe('lock request parsing, fuzzed', () => {
  it('never throws on arbitrary payloads and answers BAD_REQUEST or a decision', () => {
    withStore((open) => {
      const s = open();
      const lockSecret = newPairingSecret();
      s.store.upsertLock('lock-1', 'door-1', T0);
      const deps = {
        ...s.deps,
        access: {
          pepper: newPairingSecret(),
          lockout: { limit: 0, cooldownSeconds: 60 },
          siteLockout: { limit: 0, windowSeconds: 600, cooldownSeconds: 300 },
          requestRate: { burst: 1_000_000, perSecond: 1000 },
          holdMs: 1000,
          commandTtlMs: 10_000,
          pairingSecrets: new Map([['lock-1', lockSecret]]),
          offlineGraceSeconds: 300,
        },
        buckets: new Map(),
        storageLow: () => false,
      };
      const payload = fc.oneof(
        fc.uint8Array({ maxLength: 300 }),
        fc.string({ maxLength: 300 }).map((t) => Buffer.from(t)),
        fc.jsonValue().map((v) => Buffer.from(JSON.stringify(v) ?? 'null')),
        fc
          .record({
            requestId: fc.string(),
            credential: fc.record({ type: fc.constantFrom('pin', 'card', 'mobile', 'x'), value: fc.string() }),
            at: fc.integer(),
          })
          .map((v) => Buffer.from(JSON.stringify(v))),
      );
      fc.assert(
        fc.property(fc.array(payload, { minLength: 1, maxLength: 5 }), (payloads) => {
          const answers = handleLockRequests(
            deps,
            payloads.map((p) => ({ lockId: 'lock-1', payload: p })),
          );
          for (const a of answers) {
            expect(a).not.toBeNull();
            expect(a!.decision.allowed).toBe(false);
            expect(['BAD_REQUEST', 'UNKNOWN_CREDENTIAL', 'LOCKED_OUT']).toContain(a!.decision.code);
          }
        }),
        { numRuns: 200 },
      );
      s.close();
    });
  });
});

describe('a message that kills the process while it is applied', () => {
  it('is failed, not retried forever, once crashed claims used up its attempts', () => {
    withStore((open) => {
      const s = open();
      const m = message({ kind: 'grant', key: 1, version: 1 }, 1);
      s.store.insertInbox(m, T0);
      const row = s.store.nextInbox(0, T0)!;
      for (let i = 0; i < 3; i++) {
        // claim, then "crash": the restart releases the claim
        expect(s.store.claimInbox(row.id, T0 + 30_000)).toBe(true);
        s.store.releaseAllClaims();
      }
      let tried = false;
      applyPending({ ...s.deps, beforeApply: () => (tried = true) });
      expect(tried).toBe(false);
      expect(s.store.db.prepare('SELECT status, code FROM inbox').get()).toEqual({ status: 'failed', code: 'APPLY_FAILED' });
      expect(JSON.parse((s.store.db.prepare("SELECT body FROM outbox WHERE type = 'ack'").get() as { body: string }).body)).toMatchObject({
        ackOf: m.jti,
        result: 'refused',
        code: 'APPLY_FAILED',
        keyId: 'key-1',
      });
      expect(s.store.settings().appliedSeq).toBe(1);
      s.close();
    });
  });
});
