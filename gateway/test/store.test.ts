import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { asLockId, newCorrelationId, newMessageId, type DownlinkMessage } from '@tobira/shared';
import { MIGRATIONS_DIR, migrate, openDatabase, type WritableDb } from '../src/adapters/sqlite/db.js';
import { GatewayStore, type StoredAccessEvent } from '../src/adapters/sqlite/store.js';
import { T0 } from './fixtures.js';
import { accessRow } from './staff-helpers.js';

const DAY = 86_400_000;

describe('SQLite store', () => {
  let dir: string;
  let db: WritableDb;
  let store: GatewayStore;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'tobira-store-'));
    db = openDatabase(join(dir, 'g.sqlite'));
    store = new GatewayStore(db, { maxRows: 2 });
  });
  afterEach(() => {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const heartbeat = (): DownlinkMessage => ({
    jti: newMessageId(),
    iss: 'tobira-cloud',
    aud: 'gw',
    iat: T0 / 1000,
    exp: T0 / 1000 + 60,
    cid: newCorrelationId(),
    type: 'heartbeat',
    body: { lastSeq: 0, intervalMs: 1000 },
  });

  it('opens in WAL with synchronous=FULL and applies migrations once', () => {
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
    expect(db.pragma('synchronous', { simple: true })).toBe(2);
    expect(migrate(db)).toEqual([]);
    expect(db.prepare('SELECT version, name FROM schema_migrations').all()).toEqual([
      { version: 1, name: 'init' },
      { version: 2, name: 'snapshot_parts_received_at' },
      { version: 3, name: 'lock_refusals' },
      { version: 4, name: 'seq_conflict' },
      { version: 5, name: 'rejected_claims' },
      { version: 6, name: 'uplink_ack_behind' },
      { version: 7, name: 'flood_bounds' },
      { version: 8, name: 'staff_accounts' },
      { version: 9, name: 'trusted_cloud_keys' },
      { version: 10, name: 'one_time_keys' },
      { version: 11, name: 'modes' },
      { version: 12, name: 'uplink_keys' },
      { version: 13, name: 'mobile_token_uses' },
      { version: 14, name: 'lock_event_budget' },
      { version: 15, name: 'staff_totp' },
      { version: 16, name: 'privacy_order' },
      { version: 17, name: 'staff_known_addresses' },
    ]);
  });

  it('upgrades a database from before 0005 in place: its rejected rows keep their data and claim nothing', () => {
    const old = join(dir, 'before-0005');
    mkdirSync(old);
    for (const f of readdirSync(MIGRATIONS_DIR).filter((f) => /^000[1-4]_/.test(f))) copyFileSync(join(MIGRATIONS_DIR, f), join(old, f));
    const earlier = openDatabase(join(dir, 'earlier.sqlite'), old);
    earlier.prepare("INSERT INTO rejected (at, topic, code, detail, bytes) VALUES (1, 't', 'MALFORMED', 'not a compact JWS', 9)").run();
    expect(migrate(earlier)[0]).toBe(5); // and every later one
    expect(earlier.prepare('SELECT * FROM rejected').all()).toEqual([
      {
        id: 1,
        at: 1,
        topic: 't',
        code: 'MALFORMED',
        detail: 'not a compact JWS',
        bytes: 9,
        claimed_jti: null,
        claimed_cid: null,
        claimed_type: null,
        claimed_seq: null,
        claimed_issuer: null,
      },
    ]);
    expect(() =>
      earlier
        .prepare("INSERT INTO rejected (at, topic, code, detail, bytes, claimed_cid) VALUES (1, 't', 'c', 'd', 1, ?)")
        .run('x'.repeat(129)),
    ).toThrow(/CHECK constraint failed/);
    earlier.close();
  });

  it('has STRICT tables that refuse wrongly typed values', () => {
    expect(() => db.prepare("INSERT INTO tombstones (key_id, version, at) VALUES ('k', 'not a number', 0)").run()).toThrow(
      /cannot store TEXT value in INTEGER column/,
    );
  });

  it('stores a message id once and raises the trusted-time floor', () => {
    const m = heartbeat();
    expect(store.insertInbox(m, T0)).toBe('inserted');
    expect(store.insertInbox(m, T0)).toBe('duplicate');
    expect(store.inboxDepth()).toBe(1);
    expect(store.settings().maxIatMs).toBe(T0);
  });

  it('reclaims a claim whose lease ran out, and only then', () => {
    store.insertInbox(heartbeat(), T0);
    const row = store.nextInbox(0, T0)!;
    expect(store.claimInbox(row.id, T0 + 30_000)).toBe(true);
    expect(store.nextInbox(0, T0 + 1000)).toBeNull();
    expect(store.reclaimExpired(T0 + 1000)).toBe(0);
    expect(store.reclaimExpired(T0 + 30_000)).toBe(1);
    expect(store.nextInbox(0, T0 + 30_000)?.id).toBe(row.id);
  });

  it('purges processed rows after 30 days and keeps failed and recent ones', () => {
    for (let i = 0; i < 3; i++) store.insertInbox(heartbeat(), T0);
    const [a, b, c] = db.prepare('SELECT id FROM inbox ORDER BY id').all() as { id: number }[];
    store.markProcessed(a!.id, 'applied', 'MESSAGE_APPLIED', T0 - 31 * DAY);
    store.markProcessed(b!.id, 'applied', 'MESSAGE_APPLIED', T0 - 29 * DAY);
    store.failInbox(c!.id, 'boom', true, T0 - 40 * DAY);
    expect(store.purgeProcessed(T0 - 30 * DAY)).toBe(1);
    expect(store.inboxByStatus()).toEqual({ processed: 1, failed: 1 });
  });

  it('drops snapshots whose parts never all arrived after a day', () => {
    const part = (snapshotId: string, part: number) => ({
      snapshotId,
      part,
      parts: 2,
      asOfSeq: 1,
      jti: newMessageId(),
      cid: 'c',
      body: {},
    });
    store.addSnapshotPart(part('old', 1), T0 - 2 * DAY);
    store.addSnapshotPart(part('new', 1), T0);
    expect(store.purgeIncompleteSnapshots(T0 - DAY)).toBe(1);
    expect(store.snapshotParts('new')).toHaveLength(1);
  });

  it('gives the outbox a gap-free seq and refuses only non-essential rows when full', () => {
    const status = { mode: 'normal' as const, appliedSeq: 0, leaseExpiresAt: null, outboxDepth: 0, locks: [] };
    const ack = { ackOf: newMessageId(), ackSeq: 1, result: 'applied' as const, code: 'KEY_ACTIVATED', keyId: null, keyVersion: null };
    const tx = <T>(f: () => T) => db.transaction(f).immediate();
    expect(tx(() => store.enqueue('gateway.status', status, 'c', false, T0))).toMatchObject({ seq: 1 });
    expect(tx(() => store.enqueue('ack', ack, 'c', true, T0))).toMatchObject({ seq: 2 });
    expect(tx(() => store.enqueue('gateway.status', status, 'c', false, T0))).toEqual({ refused: 'OUTBOX_FULL' });
    expect(tx(() => store.enqueue('ack', ack, 'c', true, T0))).toMatchObject({ seq: 3 });
    store.markSent([1, 2], T0);
    expect(tx(() => store.enqueue('gateway.status', status, 'c', false, T0))).toMatchObject({ seq: 4 });
    expect(store.pendingOutbox(10).map((r) => r.seq)).toEqual([3, 4]);
    // a rolled-back enqueue does not burn a seq
    expect(() =>
      tx(() => {
        store.enqueue('ack', ack, 'c', true, T0);
        throw new Error('rollback');
      }),
    ).toThrow('rollback');
    expect(tx(() => store.enqueue('ack', ack, 'c', true, T0))).toMatchObject({ seq: 5 });
  });

  describe('when uplinks wait for the cloud to acknowledge them', () => {
    const status = { mode: 'normal' as const, appliedSeq: 0, leaseExpiresAt: null, outboxDepth: 0, locks: [] };
    const tx = <T>(f: () => T) => db.transaction(f).immediate();
    const jtiAt = (seq: number) => (db.prepare('SELECT jti FROM outbox WHERE seq = ?').get(seq) as { jti: string }).jti;
    const unacked = () =>
      db.prepare('SELECT seq, status FROM outbox WHERE acked_at IS NULL ORDER BY seq').all() as { seq: number; status: string }[];
    beforeEach(() => {
      store = new GatewayStore(db, { maxRows: 100 });
      for (let i = 0; i < 4; i++) tx(() => store.enqueue('gateway.status', status, 'c', false, T0));
      store.markSent([1, 2, 3, 4], T0);
    });

    it('keeps every row the broker took until the cloud acknowledges it, and never purges an unacknowledged one', () => {
      expect(store.outboxDepth()).toBe(0);
      expect(store.outboxUnacked()).toBe(4);
      expect(store.purgeSentOutbox(T0 + 30 * DAY)).toBe(0);
      expect(tx(() => store.ackUplink(2, jtiAt(2), T0 + 1000))).toEqual({ acked: 2 });
      expect(unacked()).toEqual([
        { seq: 3, status: 'sent' },
        { seq: 4, status: 'sent' },
      ]);
      expect(store.settings().uplinkAckedSeq).toBe(2);
      expect(store.purgeSentOutbox(T0 + 30 * DAY)).toBe(2); // only the acknowledged rows
      expect(tx(() => store.ackUplink(1, 'ignored: purged and acknowledged before', T0 + 2000))).toEqual({ acked: 0 });
    });

    it('ignores an acknowledgement whose jti is not its own at that seq (another history), and drops nothing', () => {
      expect(tx(() => store.ackUplink(3, newMessageId(), T0))).toEqual({ foreign: true, ourJti: jtiAt(3) });
      expect(tx(() => store.ackUplink(9, newMessageId(), T0))).toEqual({ foreign: true, ourJti: null });
      expect(store.outboxUnacked()).toBe(4);
    });

    it('sends again what the cloud has not acknowledged in time, and an acknowledgement covers rows waiting to be sent again', () => {
      expect(tx(() => store.requeueUnacked(T0, T0 + 60_000))).toBe(0); // taken at T0: not overdue yet
      expect(tx(() => store.requeueUnacked(T0 + 1, T0 + 60_001))).toBe(4);
      expect(store.pendingOutbox(10).map((r) => r.seq)).toEqual([1, 2, 3, 4]);
      expect(tx(() => store.ackUplink(3, jtiAt(3), T0 + 5))).toEqual({ acked: 3 });
      expect(store.pendingOutbox(10).map((r) => r.seq)).toEqual([4]);
    });
    it('sends again at once rows stamped after now (a clock that ran ahead, or a backup that kept its stamps), not after the clock passes the stamp', () => {
      const DAYS_AHEAD = T0 + 3 * DAY;
      store.db.prepare('UPDATE outbox SET sent_at = ? WHERE seq IN (3, 4)').run(DAYS_AHEAD);
      expect(tx(() => store.requeueUnacked(T0 - 1, T0 + 10))).toBe(2);
      expect(store.pendingOutbox(10).map((r) => r.seq)).toEqual([3, 4]);
    });
  });

  it('upgrades a database from before 0006 in place: rows already sent count as acknowledged, pending ones do not', () => {
    const old = join(dir, 'before-0006');
    mkdirSync(old);
    for (const f of readdirSync(MIGRATIONS_DIR).filter((f) => /^000[1-5]_/.test(f))) copyFileSync(join(MIGRATIONS_DIR, f), join(old, f));
    const earlier = openDatabase(join(dir, 'earlier6.sqlite'), old);
    earlier
      .prepare(
        "INSERT INTO outbox (seq, jti, type, cid, body, essential, status, created_at, sent_at) VALUES (1, 'a', 'ack', 'c', '{}', 1, 'sent', 1, 2), (2, 'b', 'ack', 'c', '{}', 1, 'pending', 1, NULL)",
      )
      .run();
    expect(migrate(earlier)[0]).toBe(6);
    expect(earlier.prepare('SELECT seq, status, acked_at FROM outbox ORDER BY seq').all()).toEqual([
      { seq: 1, status: 'sent', acked_at: 2 },
      { seq: 2, status: 'pending', acked_at: null },
    ]);
    expect(new GatewayStore(earlier).settings()).toMatchObject({ cloudLastSeq: null, behindHeartbeat: null, uplinkAckedSeq: 0 });
    earlier.close();
  });

  describe('access-log retention', () => {
    /** The broker took these rows and the cloud acknowledged applying them (a heartbeat's uplinkAck). */
    const reachedCloud = (st: GatewayStore, seqs: number[], at: number) => {
      st.markSent(seqs, at);
      for (const seq of seqs) st.db.prepare('UPDATE outbox SET acked_at = ? WHERE seq = ?').run(at, seq);
    };
    /** A decision as access.ts writes it: its access.event outbox row and its access-log row, in one transaction. */
    const decided = (st: GatewayStore, at: number): StoredAccessEvent & { seq: number } => {
      const row = accessRow({ at });
      const body = {
        eventId: row.eventId,
        requestId: row.requestId,
        lockId: asLockId(row.lockId),
        doorId: null,
        at,
        allowed: false,
        code: 'UNKNOWN_CREDENTIAL' as const,
        keyId: null,
        keyVersion: null,
        personId: null,
        credentialType: 'pin' as const,
        commandId: null,
      };
      return st.db
        .transaction(() => {
          const q = st.enqueue('access.event', body, row.cid, true, at);
          if (!('seq' in q)) throw new Error('refused');
          st.insertAccess(row, q.seq);
          return { ...row, seq: q.seq };
        })
        .immediate();
    };
    const kept = (st: GatewayStore) =>
      (st.db.prepare('SELECT event_id FROM access_log ORDER BY id').all() as { event_id: string }[]).map((r) => r.event_id);

    it('prunes rows older than the age bound only once their event reached the cloud; an unsent one is kept however old', () => {
      const st = new GatewayStore(db, { maxRows: 100 }, { accessLogMaxAgeMs: 30 * DAY });
      const sentOld = decided(st, T0 - 31 * DAY);
      const unsentOld = decided(st, T0 - 40 * DAY);
      const sentAndOutboxPurged = decided(st, T0 - 32 * DAY);
      const sentRecent = decided(st, T0 - 29 * DAY);
      reachedCloud(st, [sentOld.seq, sentAndOutboxPurged.seq, sentRecent.seq], T0 - 20 * DAY);
      expect(st.purgeSentOutbox(T0 - 7 * DAY)).toBe(3);

      expect(st.purgeAccessLog(T0)).toBe(2);
      expect(kept(st)).toEqual([unsentOld.eventId, sentRecent.eventId]);
      // The unsent event is still on its way: once sent, the next purge takes it.
      reachedCloud(st, [unsentOld.seq], T0);
      expect(st.purgeAccessLog(T0)).toBe(1);
      expect(kept(st)).toEqual([sentRecent.eventId]);
    });

    it('keeps the newest rows beyond the row bound, pruning the oldest sent ones and never an unsent one', () => {
      const st = new GatewayStore(db, { maxRows: 100 }, { accessLogMaxRows: 2 });
      const rows = Array.from({ length: 6 }, (_, i) => decided(st, T0 + i));
      // Rows 0 and 2 never reached the cloud (a long outage); the rest did.
      reachedCloud(st, [rows[1]!.seq, rows[3]!.seq, rows[4]!.seq, rows[5]!.seq], T0 + 10);
      expect(st.purgeAccessLog(T0 + 10)).toBe(2);
      expect(kept(st)).toEqual([rows[0]!.eventId, rows[2]!.eventId, rows[4]!.eventId, rows[5]!.eventId]);
      // Nothing else changed: the outbox rows are the purge of the outbox's business.
      expect(st.outboxDepth()).toBe(2);
      expect(st.purgeAccessLog(T0 + 10)).toBe(0);
    });

    it('upgrades a database from before 0007: its access rows find their outbox rows, so an unsent old one survives the purge', () => {
      const old = join(dir, 'before-0007');
      mkdirSync(old);
      for (const f of readdirSync(MIGRATIONS_DIR).filter((f) => Number(f.slice(0, 4)) < 7))
        copyFileSync(join(MIGRATIONS_DIR, f), join(old, f));
      const earlier = openDatabase(join(dir, 'earlier.sqlite'), old);
      const before = new GatewayStore(earlier);
      // Written as the code before 0007 did: the access row has no outbox seq column yet.
      const write = (at: number) => {
        const row = accessRow({ at });
        const body = {
          eventId: row.eventId,
          requestId: row.requestId,
          lockId: asLockId(row.lockId),
          doorId: null,
          at,
          allowed: false,
          code: 'UNKNOWN_CREDENTIAL' as const,
          keyId: null,
          keyVersion: null,
          personId: null,
          credentialType: 'pin' as const,
          commandId: null,
        };
        return earlier
          .transaction(() => {
            earlier
              .prepare(
                `INSERT INTO access_log (event_id, lock_id, request_id, door_id, at, allowed, code, key_id, key_version, person_id, credential_type, command_id, command_expires_at, hold_ms, cid)
                 VALUES (?, ?, ?, NULL, ?, 0, 'UNKNOWN_CREDENTIAL', NULL, NULL, NULL, 'pin', NULL, NULL, NULL, ?)`,
              )
              .run(row.eventId, row.lockId, row.requestId, at, row.cid);
            const q = before.enqueue('access.event', body, row.cid, true, at);
            return { eventId: row.eventId, seq: 'seq' in q ? q.seq : -1 };
          })
          .immediate();
      };
      const unsent = write(T0 - 40 * DAY);
      const sentGone = write(T0 - 40 * DAY);
      reachedCloud(before, [sentGone.seq], T0 - 39 * DAY);
      before.purgeSentOutbox(T0 - 7 * DAY);
      expect(migrate(earlier)).toEqual([7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]);
      expect(earlier.prepare('SELECT event_id, outbox_seq FROM access_log ORDER BY id').all()).toEqual([
        { event_id: unsent.eventId, outbox_seq: unsent.seq },
        { event_id: sentGone.eventId, outbox_seq: null },
      ]);
      const after = new GatewayStore(earlier);
      expect(after.purgeAccessLog(T0)).toBe(1);
      expect(kept(after)).toEqual([unsent.eventId]);
      earlier.close();
    });
  });

  it('keeps the site-wide lockout per credential type', () => {
    expect(store.siteLockout('pin')).toEqual({ failures: 0, windowStart: null, lockedOutUntil: null });
    store.setSiteLockout('pin', { failures: 3, windowStart: T0, lockedOutUntil: null }, T0);
    store.setSiteLockout('pin', { failures: 0, windowStart: null, lockedOutUntil: T0 + 5 }, T0);
    store.setSiteLockout('card', { failures: 1, windowStart: T0, lockedOutUntil: null }, T0);
    expect(store.siteLockout('pin')).toEqual({ failures: 0, windowStart: null, lockedOutUntil: T0 + 5 });
    expect(store.siteLockout('card')).toEqual({ failures: 1, windowStart: T0, lockedOutUntil: null });
    expect(store.siteLockout('mobile')).toEqual({ failures: 0, windowStart: null, lockedOutUntil: null });
  });
});
