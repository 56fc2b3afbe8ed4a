import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ManualClock } from '@tobira/shared';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openDatabase, type WritableDb } from '../src/adapters/sqlite/db.js';
import { GatewayStore } from '../src/adapters/sqlite/store.js';
import type { RetentionLimits } from '../src/adapters/sqlite/store.js';
import { purgeOld } from '../src/app/retention.js';
import { staffAudit } from '../src/app/staff-audit.js';
import { TrustedTime } from '../src/app/context.js';
import { T0 } from './fixtures.js';

const DAY = 24 * 3600 * 1000;

/**
 * Retention of the gateway's staff audit (staff_actions), in the hourly purge
 * (app/retention.ts), on a real SQLite file: bounded by age and by rows like
 * the access log, and never a row whose staff.action the cloud has not
 * acknowledged.
 */
describe('staff audit retention', () => {
  let dir: string;
  let db: WritableDb;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'tobira-staff-ret-'));
    db = openDatabase(join(dir, 'g.sqlite'));
  });
  afterEach(() => {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** One audited action at `at`, as a staff route writes it (row and uplink in one transaction); returns its outbox seq. */
  const act = (st: GatewayStore, at: number, target: string): number => {
    const audit = staffAudit(st.db, () => at, st.limits);
    st.db
      .transaction(() =>
        audit({
          actor: { accountId: 'acc-1', displayName: 'Aiko Tanaka', role: 'supervisor', username: 'aiko', via: 'session' } as never,
          action: 'ack_alarm',
          target,
          detail: null,
          result: 'applied',
          code: null,
          cid: `cid-${target}`,
        }),
      )
      .immediate();
    return (st.db.prepare('SELECT max(seq) AS seq FROM outbox').get() as { seq: number }).seq;
  };
  const acked = (st: GatewayStore, seqs: number[], at: number) => {
    st.markSent(seqs, at);
    for (const seq of seqs) st.db.prepare('UPDATE outbox SET acked_at = ? WHERE seq = ?').run(at, seq);
  };
  const kept = (st: GatewayStore) =>
    (st.db.prepare('SELECT target FROM staff_actions ORDER BY id').all() as { target: string }[]).map((r) => r.target);
  const purge = (st: GatewayStore, now: number) => {
    const clock = new ManualClock(now);
    return purgeOld({ store: st, time: new TrustedTime(clock, clock) });
  };
  const store = (r: Partial<RetentionLimits>) => new GatewayStore(db, undefined, r);

  it('deletes rows older than the age bound once the cloud has them, and keeps an unacknowledged one however old', () => {
    const st = store({ staffActionsMaxAgeMs: 90 * DAY });
    const old = act(st, T0 - 100 * DAY, 'old-acked');
    act(st, T0 - 120 * DAY, 'old-unacked');
    const recent = act(st, T0 - 10 * DAY, 'recent');
    acked(st, [old, recent], T0 - 5 * DAY);
    purge(st, T0);
    expect(kept(st)).toEqual(['old-unacked', 'recent']);

    // once the cloud acknowledges it, the next purge takes it
    const rest = (st.db.prepare("SELECT seq FROM outbox WHERE acked_at IS NULL AND type = 'staff.action'").all() as { seq: number }[]).map(
      (r) => r.seq,
    );
    acked(st, rest, T0);
    purge(st, T0);
    expect(kept(st)).toEqual(['recent']);
  });

  it('keeps at most the newest rows of the row bound, never deleting an unacknowledged one to get there', () => {
    const st = store({ staffActionsMaxRows: 2 });
    const seqs = Array.from({ length: 6 }, (_, i) => act(st, T0 + i, `a${i}`));
    acked(st, [seqs[1]!, seqs[3]!, seqs[4]!, seqs[5]!], T0 + 10);
    purge(st, T0 + 10);
    expect(kept(st)).toEqual(['a0', 'a2', 'a4', 'a5']);
    // the outbox rows are not the staff purge's business (they go by the outbox's own retention)
    expect(st.db.prepare("SELECT count(*) AS n FROM outbox WHERE type = 'staff.action'").get()).toEqual({ n: 6 });
  });

  it('leaves the access log, and a recent staff row, alone', () => {
    const st = store({ staffActionsMaxAgeMs: DAY, staffActionsMaxRows: 10 });
    const s = act(st, T0 - DAY / 2, 'fresh');
    acked(st, [s], T0);
    purge(st, T0);
    expect(kept(st)).toEqual(['fresh']);
  });
});
