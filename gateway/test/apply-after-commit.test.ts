import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ManualClock, asKeyId, newCorrelationId, newMessageId, type DownlinkMessage } from '@tobira/shared';
import { pino } from 'pino';
import { openDatabase } from '../src/adapters/sqlite/db.js';
import { GatewayStore } from '../src/adapters/sqlite/store.js';
import { applyPending, type ApplyDeps } from '../src/app/apply.js';
import { TrustedTime, noCrash } from '../src/app/context.js';
import { createMetrics } from '../src/metrics.js';
import { T0, grant } from './fixtures.js';

/**
 * An error thrown after an apply has committed (waking the uplink sender, a
 * resync request, a full disk while recording it) is not a failed apply: on
 * the row's last attempt it must not mark the applied row failed, nor ack
 * the cloud `refused APPLY_FAILED` for a key the gateway now holds active.
 */
describe('an error after the apply committed', () => {
  it('leaves the row processed with its one applied ack', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tobira-after-commit-'));
    const db = openDatabase(join(dir, 'gateway.sqlite'));
    try {
      const store = new GatewayStore(db);
      const clock = new ManualClock(T0);
      let wakes = 0;
      const deps: ApplyDeps = {
        gatewayId: 'gw-after-commit',
        store,
        time: new TrustedTime(clock, clock),
        log: pino({ level: 'silent' }),
        metrics: createMetrics(),
        crash: noCrash,
        outboxWritten: () => {
          wakes++;
          throw new Error('uplink sender wake failed');
        },
        options: { offlineGraceSeconds: 300, maxAttempts: 3, claimLeaseMs: 30_000, resyncIntervalMs: 0, uplinkAckTimeoutMs: 60_000 },
        resyncThrottle: { lastMono: Number.NEGATIVE_INFINITY },
        requestResync: () => {},
      };
      const m: DownlinkMessage = {
        jti: newMessageId(),
        iss: 'tobira-cloud',
        aud: 'gw-after-commit',
        iat: T0 / 1000,
        exp: T0 / 1000 + 3600,
        cid: newCorrelationId(),
        seq: 1,
        type: 'key.grant',
        body: { key: grant({ keyId: asKeyId('key-1') }) },
      };
      store.insertInbox(m, T0);
      // two earlier attempts died (claimed, then released at restart): this is the last one
      const row = store.nextInbox(0, T0)!;
      for (let i = 0; i < 2; i++) {
        expect(store.claimInbox(row.id, T0 + 30_000)).toBe(true);
        store.releaseAllClaims();
      }
      try {
        applyPending(deps);
      } catch {
        // the error may surface to the caller (the tick logs it); what matters is what was kept
      }
      expect(wakes).toBeGreaterThan(0);
      expect(store.loadSlot('key-1').key?.status).toBe('active');
      expect(db.prepare('SELECT status, code FROM inbox').get()).toEqual({ status: 'processed', code: 'KEY_ACTIVATED' });
      const acks = db.prepare("SELECT body FROM outbox WHERE type = 'ack'").all() as { body: string }[];
      expect(acks.map((a) => JSON.parse(a.body) as { result: string; code: string })).toEqual([
        expect.objectContaining({ result: 'applied', code: 'KEY_ACTIVATED' }),
      ]);
    } finally {
      db.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
