import { z } from 'zod';
import { CorrelationId, DoorId, PersonId, SiteId, decodeCursor, pageOf, parseRow, parseRows, type Page } from '@tobira/shared';
import { CANCEL_REASONS, QUOTA_RETURNS, type CancellationPolicy } from '../../domain/cancellation-policy.js';
import { STAY_STATUSES, type StayStatus } from '../../domain/stay-states.js';
import { defaultStaySettings, type Room, type SiteStaySettings, type Stay } from '../../domain/stays.js';
import type { Queryable, Tx } from './db.js';

/**
 * Rooms, site stay settings, stays and their reserved nights. Every function
 * takes the caller's `Queryable`/`Tx`: the use case owns the transaction.
 * Writes are judged by rows affected, never by an exception.
 */

const IsoDate = z.string().regex(/^\d{4}-\d{2}-\d{2}$/);
const Money = z.number().int().nonnegative();

const StayRow = z.object({
  id: z.string().min(1),
  site_id: SiteId,
  room_id: z.string().min(1),
  person_id: PersonId,
  check_in: IsoDate,
  check_out: IsoDate,
  nights: z.array(IsoDate),
  amount: Money,
  currency: z.string().regex(/^[a-z]{3}$/),
  deposit: Money,
  status: z.enum(STAY_STATUSES),
  version: z.number().int().positive(),
  hold_until: z.number().int(),
  key_id: z.string().nullable(),
  credential_type: z.enum(['pin', 'card']).nullable(),
  credential_digest: z.string().min(1).nullable(),
  cancel_reason: z.enum(CANCEL_REASONS).nullable(),
  membership_id: z.string().nullable(),
  last_code: z.string(),
  cid: CorrelationId,
  created_at: z.number().int(),
  updated_at: z.number().int(),
});

function stayOf(raw: unknown): Stay {
  const r = parseRow('stays', StayRow, raw);
  return {
    id: r.id,
    siteId: r.site_id,
    roomId: r.room_id,
    personId: r.person_id,
    checkIn: r.check_in,
    checkOut: r.check_out,
    // a stay that released its nights still has them: they are its dates, recomputed, not the reservation rows
    nights: r.nights,
    amount: r.amount,
    currency: r.currency,
    deposit: r.deposit,
    status: r.status,
    version: r.version,
    holdUntil: r.hold_until,
    keyId: r.key_id,
    guestCredential:
      r.credential_type !== null && r.credential_digest !== null ? { type: r.credential_type, digest: r.credential_digest } : null,
    cancelReason: r.cancel_reason,
    membershipId: r.membership_id,
    lastCode: r.last_code,
    cid: r.cid,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

// dates as text (the drivers would make a local-midnight Date of them); nights from the dates, not from stay_nights
const STAY_COLUMNS = `s.id, s.site_id, s.room_id, s.person_id, s.check_in::text AS check_in, s.check_out::text AS check_out,
  ARRAY(SELECT d::date::text FROM generate_series(s.check_in::timestamp, s.check_out::timestamp - interval '1 day', interval '1 day') d) AS nights,
  s.amount, s.currency, s.deposit, s.status, s.version, s.hold_until, s.key_id, s.credential_type, s.credential_digest, s.cancel_reason, s.membership_id, s.last_code, s.cid, s.created_at, s.updated_at`;

export async function loadStay(q: Queryable, id: string): Promise<Stay | null> {
  const r = await q.query(`SELECT ${STAY_COLUMNS} FROM stays s WHERE s.id = $1`, [id]);
  return r.rows[0] === undefined ? null : stayOf(r.rows[0]);
}

/** Same, with the row locked until the caller's transaction ends (the verb's load-decide-write). */
export async function loadStayForUpdate(q: Queryable, id: string): Promise<Stay | null> {
  const r = await q.query(`SELECT ${STAY_COLUMNS} FROM stays s WHERE s.id = $1 FOR UPDATE`, [id]);
  return r.rows[0] === undefined ? null : stayOf(r.rows[0]);
}

export type InsertStayResult = 'inserted' | 'exists' | 'ROOM_UNAVAILABLE';

/**
 * Insert of a booked stay and one `stay_nights` row per night, in a
 * savepoint of the caller's transaction. The nights' primary key decides a
 * clash (ON CONFLICT DO NOTHING waits for a rival's in-flight insert, then
 * skips): fewer rows than nights is `ROOM_UNAVAILABLE` and the savepoint's
 * writes are undone, so nothing is left holding the room. Nights are taken
 * in date order, so overlapping bookings wait on each other without
 * deadlocking. Needs tobira.verb.
 */
export async function insertStayWithNights(tx: Tx, s: Stay): Promise<InsertStayResult> {
  return tx.transaction(async (sp) => {
    const ins = await sp.query(
      `INSERT INTO stays (id, site_id, room_id, person_id, check_in, check_out, amount, currency, deposit, status, version,
         hold_until, key_id, cancel_reason, last_code, cid, created_at, updated_at, credential_type, credential_digest, membership_id)
       VALUES ($1,$2,$3,$4,$5::date,$6::date,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21)
       ON CONFLICT (id) DO NOTHING`,
      [
        s.id,
        s.siteId,
        s.roomId,
        s.personId,
        s.checkIn,
        s.checkOut,
        s.amount,
        s.currency,
        s.deposit,
        s.status,
        s.version,
        s.holdUntil,
        s.keyId,
        s.cancelReason,
        s.lastCode,
        s.cid,
        s.createdAt,
        s.updatedAt,
        s.guestCredential?.type ?? null,
        s.guestCredential?.digest ?? null,
        s.membershipId ?? null,
      ],
    );
    if (ins.rowCount === 0) return 'exists';
    const nights = await sp.query(
      `INSERT INTO stay_nights (room_id, night, stay_id)
       SELECT $1, n::date, $2 FROM unnest($3::text[]) AS n ORDER BY n
       ON CONFLICT (room_id, night) DO NOTHING`,
      [s.roomId, s.id, [...s.nights]],
    );
    if (nights.rowCount === s.nights.length) {
      // a door of several rooms: the nights are held per door as well, so one physical door is never double booked
      const doors = await sp.query(
        `INSERT INTO stay_door_nights (door_id, night, stay_id)
         SELECT d.door_id, n::date, $2 FROM room_doors d CROSS JOIN unnest($3::text[]) AS n WHERE d.room_id = $1
         ORDER BY d.door_id, n
         ON CONFLICT (door_id, night) DO NOTHING`,
        [s.roomId, s.id, [...s.nights]],
      );
      const want = await sp.query<{ n: number }>('SELECT count(*)::int AS n FROM room_doors WHERE room_id = $1', [s.roomId]);
      if (doors.rowCount === Number(want.rows[0]?.n ?? 0) * s.nights.length) return 'inserted';
    }
    await sp.query('DELETE FROM stay_door_nights WHERE stay_id = $1', [s.id]);
    await sp.query('DELETE FROM stay_nights WHERE stay_id = $1', [s.id]);
    await sp.query('DELETE FROM stays WHERE id = $1', [s.id]);
    return 'ROOM_UNAVAILABLE';
  });
}

/** Compare-and-set on the version: 1 row = we won, 0 rows = the stay changed first. Needs tobira.verb. */
export async function casStay(q: Queryable, s: Stay, expectedVersion: number): Promise<number> {
  const r = await q.query(
    `UPDATE stays SET status = $3, version = $4, key_id = $5, cancel_reason = $6, last_code = $7, cid = $8, updated_at = $9
      WHERE id = $1 AND version = $2`,
    [s.id, expectedVersion, s.status, s.version, s.keyId, s.cancelReason, s.lastCode, s.cid, s.updatedAt],
  );
  return r.rowCount;
}

/** Releases every night a stay holds (its status change must be in the same transaction: a deferred trigger checks). */
export async function releaseNights(q: Queryable, stayId: string): Promise<number> {
  await q.query('DELETE FROM stay_door_nights WHERE stay_id = $1', [stayId]);
  return (await q.query('DELETE FROM stay_nights WHERE stay_id = $1', [stayId])).rowCount;
}

/** The nights a room is held for in [from, to), with the stays holding them. */
export async function heldNights(q: Queryable, roomId: string, from: string, to: string): Promise<{ night: string; stayId: string }[]> {
  const r = await q.query(
    `SELECT night::text AS night, stay_id FROM stay_nights WHERE room_id = $1 AND night >= $2::date AND night < $3::date ORDER BY night`,
    [roomId, from, to],
  );
  return parseRows('stay_nights', z.object({ night: IsoDate, stay_id: z.string() }), r.rows).map((x) => ({
    night: x.night,
    stayId: x.stay_id,
  }));
}

/** Pending stays whose hold has ended (the hold sweeper's input), oldest first. */
export async function listExpiredHolds(q: Queryable, now: number, limit: number): Promise<string[]> {
  // a stay with a payment still processing waits for it (expireStay answers STAY_PAYMENT_PROCESSING): left out
  // here so such stays never fill the batch ahead of the ones that can expire
  const r = await q.query(
    `SELECT s.id FROM stays s WHERE s.status = 'pending' AND s.hold_until <= $1
       AND NOT EXISTS (SELECT 1 FROM payments p WHERE p.stay_id = s.id AND p.status = 'processing')
     ORDER BY s.hold_until, s.id LIMIT $2`,
    [now, limit],
  );
  return parseRows('stays', z.object({ id: z.string() }), r.rows).map((x) => x.id);
}

const StayCursor = z.tuple([z.number().int(), z.string()]);

export interface StayFilter {
  readonly siteIds?: readonly string[];
  readonly status?: StayStatus;
  readonly limit: number;
  readonly cursor?: string;
}

/** A page of stays, oldest first, keyset-paginated on (created_at, id); 'bad_cursor' for a cursor that is not ours. */
export async function listStays(q: Queryable, f: StayFilter): Promise<Page<Stay> | 'bad_cursor'> {
  const after = decodeCursor(StayCursor, f.cursor);
  if (after === 'bad') return 'bad_cursor';
  const r = await q.query(
    `SELECT ${STAY_COLUMNS} FROM stays s
      WHERE ($1::text[] IS NULL OR s.site_id = ANY($1::text[]))
        AND ($2::text IS NULL OR s.status = $2)
        AND ($3::bigint IS NULL OR (s.created_at, s.id) > ($3::bigint, $4::text))
      ORDER BY s.created_at, s.id LIMIT $5`,
    [f.siteIds === undefined ? null : [...f.siteIds], f.status ?? null, after?.[0] ?? null, after?.[1] ?? null, f.limit + 1],
  );
  return pageOf(r.rows.map(stayOf), f.limit, (s) => [s.createdAt, s.id]);
}

// ---------------------------------------------------------------- rooms

const RoomRow = z.object({ id: z.string().min(1), site_id: SiteId, name: z.string(), doors: z.array(DoorId) });

export async function loadRoom(q: Queryable, id: string): Promise<Room | null> {
  const r = await q.query(
    `SELECT r.id, r.site_id, r.name, ARRAY(SELECT door_id FROM room_doors WHERE room_id = r.id ORDER BY door_id) AS doors
       FROM rooms r WHERE r.id = $1`,
    [id],
  );
  if (r.rows[0] === undefined) return null;
  const x = parseRow('rooms', RoomRow, r.rows[0]);
  return { id: x.id, siteId: x.site_id, name: x.name, doors: x.doors };
}

/** Insert of a room and its doors; 0 when the id exists. */
export async function insertRoom(tx: Tx, room: Room, now: number): Promise<number> {
  return tx.transaction(async (sp) => {
    const r = await sp.query('INSERT INTO rooms (id, site_id, name, created_at) VALUES ($1,$2,$3,$4) ON CONFLICT (id) DO NOTHING', [
      room.id,
      room.siteId,
      room.name,
      now,
    ]);
    if (r.rowCount === 0) return 0;
    await sp.query('INSERT INTO room_doors (room_id, door_id) SELECT $1, unnest($2::text[])', [room.id, [...room.doors]]);
    return 1;
  });
}

// ---------------------------------------------------------------- site stay settings

const Tier = z.object({ minDaysBefore: z.number().int().nonnegative(), refundPercent: z.number().int().min(0).max(100) });
const Policy = z.object({
  tiers: z.array(Tier),
  noShowRefundPercent: z.number().int().min(0).max(100),
  quotaReturn: z.enum(QUOTA_RETURNS).optional(),
});
const SettingsRow = z.object({
  site_id: SiteId,
  time_zone: z.string().min(1),
  hold_minutes: z.number().int().positive().nullable(),
  check_in_time: z.string().nullable(),
  check_out_time: z.string().nullable(),
  cancellation_policy: Policy.nullable(),
  currency: z.string().nullable(),
  max_nights: z.number().int().positive().nullable(),
  walk_ins_allowed: z.boolean().nullable(),
  shared_doors: z.array(DoorId),
});

/** The site's stay settings, the defaults filling what it has not set; null for an unknown site. */
export async function loadStaySettings(q: Queryable, siteId: string): Promise<SiteStaySettings | null> {
  const r = await q.query(
    `SELECT s.id AS site_id, s.time_zone, t.hold_minutes, t.check_in_time, t.check_out_time, t.cancellation_policy, t.currency, t.max_nights, t.walk_ins_allowed,
            ARRAY(SELECT door_id FROM stay_shared_doors WHERE site_id = s.id ORDER BY door_id) AS shared_doors
       FROM sites s LEFT JOIN site_stay_settings t ON t.site_id = s.id WHERE s.id = $1`,
    [siteId],
  );
  if (r.rows[0] === undefined) return null;
  const x = parseRow('site_stay_settings', SettingsRow, r.rows[0]);
  const d = defaultStaySettings(x.site_id, x.time_zone);
  const policy: CancellationPolicy = x.cancellation_policy ?? d.cancellationPolicy;
  return {
    ...d,
    holdMinutes: x.hold_minutes ?? d.holdMinutes,
    checkInTime: x.check_in_time ?? d.checkInTime,
    checkOutTime: x.check_out_time ?? d.checkOutTime,
    cancellationPolicy: policy,
    currency: x.currency ?? d.currency,
    maxNights: x.max_nights ?? d.maxNights,
    walkInsAllowed: x.walk_ins_allowed ?? d.walkInsAllowed,
    sharedDoors: x.shared_doors,
  };
}

/** Writes a site's settings and shared doors (the caller validated the policy with validatePolicy). */
export async function saveStaySettings(tx: Tx, s: SiteStaySettings, now: number): Promise<void> {
  await tx.transaction(async (sp) => {
    await sp.query(
      `INSERT INTO site_stay_settings (site_id, hold_minutes, check_in_time, check_out_time, cancellation_policy, currency, max_nights, updated_at,
         walk_ins_allowed)
       VALUES ($1,$2,$3,$4,$5::jsonb,$6,$7,$8,$9)
       ON CONFLICT (site_id) DO UPDATE SET hold_minutes = EXCLUDED.hold_minutes, check_in_time = EXCLUDED.check_in_time,
         check_out_time = EXCLUDED.check_out_time, cancellation_policy = EXCLUDED.cancellation_policy, currency = EXCLUDED.currency,
         max_nights = EXCLUDED.max_nights, updated_at = EXCLUDED.updated_at, walk_ins_allowed = EXCLUDED.walk_ins_allowed`,
      [
        s.siteId,
        s.holdMinutes,
        s.checkInTime,
        s.checkOutTime,
        JSON.stringify(s.cancellationPolicy),
        s.currency,
        s.maxNights,
        now,
        s.walkInsAllowed,
      ],
    );
    await sp.query('DELETE FROM stay_shared_doors WHERE site_id = $1', [s.siteId]);
    if (s.sharedDoors.length > 0) {
      await sp.query('INSERT INTO stay_shared_doors (site_id, door_id) SELECT $1, unnest($2::text[])', [s.siteId, [...s.sharedDoors]]);
    }
  });
}

/**
 * Confirmed or checked-in stays whose check-out date is on or before `lastDate`
 * (a superset of those whose check-out instant has passed: the caller
 * compares the instant in the site's zone), oldest check-out first.
 */
/** A site with stays under way (confirmed or checked in): its zone and check-out time (the default when unset). */
export interface SiteCheckOut {
  readonly siteId: string;
  readonly timeZone: string;
  readonly checkOutTime: string;
}

export async function listSitesWithStaysUnderway(q: Queryable): Promise<SiteCheckOut[]> {
  const r = await q.query(
    `SELECT si.id AS site_id, si.time_zone, t.check_out_time FROM sites si LEFT JOIN site_stay_settings t ON t.site_id = si.id
      WHERE EXISTS (SELECT 1 FROM stays s WHERE s.site_id = si.id AND s.status IN ('confirmed', 'checked_in')) ORDER BY si.id`,
  );
  const Row = z.object({ site_id: SiteId, time_zone: z.string().min(1), check_out_time: z.string().nullable() });
  return parseRows('sites', Row, r.rows).map((x) => ({
    siteId: x.site_id,
    timeZone: x.time_zone,
    checkOutTime: x.check_out_time ?? defaultStaySettings(x.site_id, x.time_zone).checkOutTime,
  }));
}

/**
 * Stays under way whose check-out date is on or before their site's `lastDate` (each site's own calendar:
 * `lastCheckOutDue`), oldest check-out first. Only stays that are over are listed, so none that is not due
 * takes a place in the batch.
 */
export async function listStaysEnding(
  q: Queryable,
  due: readonly { readonly siteId: string; readonly lastDate: string }[],
  limit: number,
): Promise<string[]> {
  if (due.length === 0) return [];
  const r = await q.query(
    `SELECT s.id FROM stays s JOIN unnest($1::text[], $2::date[]) AS d(site_id, last_date) ON d.site_id = s.site_id
      WHERE s.status IN ('confirmed', 'checked_in') AND s.check_out <= d.last_date ORDER BY s.check_out, s.id LIMIT $3`,
    [due.map((x) => x.siteId), due.map((x) => x.lastDate), limit],
  );
  return parseRows('stays', z.object({ id: z.string() }), r.rows).map((x) => x.id);
}

/** How many stays are still pending with their hold ended before `before` (the hold-overdue alarm's count). */
export async function countOverdueHolds(q: Queryable, before: number): Promise<number> {
  const r = await q.query(`SELECT count(*)::int AS n FROM stays WHERE status = 'pending' AND hold_until <= $1`, [before]);
  return parseRow('stays', z.object({ n: z.number().int() }), r.rows[0]).n;
}

/** Which of `doors` are at `siteId` (a room or the shared doors may only name the site's own). */
export async function doorsAtSite(q: Queryable, siteId: string, doors: readonly string[]): Promise<string[]> {
  const r = await q.query('SELECT id FROM doors WHERE site_id = $1 AND id = ANY($2::text[]) ORDER BY id', [siteId, [...doors]]);
  return parseRows('doors', z.object({ id: z.string() }), r.rows).map((x) => x.id);
}

/**
 * The members' bookings not started (pending or confirmed) booked under a membership: what its end cancels. A
 * pending one is cancelled too, so money that lands for it later is refunded, never confirmed into a key.
 */
export async function listOpenStaysOfMembership(q: Queryable, membershipId: string): Promise<string[]> {
  const r = await q.query<{ id: string }>(
    `SELECT id FROM stays WHERE membership_id = $1 AND status IN ('pending', 'confirmed') ORDER BY check_in, id`,
    [membershipId],
  );
  return r.rows.map((x) => x.id);
}
