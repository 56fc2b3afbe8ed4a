import { z } from 'zod';
import {
  CorrelationId,
  CredentialType,
  DoorId,
  GatewayId,
  KeyId,
  PersonId,
  RevokeReason,
  Schedule,
  pageOf,
  parseRow,
  parseRows,
  type Page,
  type PageQuery,
} from '@tobira/shared';
import { KEY_EVENTS, KEY_STATUSES, type KeyStatus } from '../../domain/key-states.js';
import type { EntryKey, GrantNames } from '../../domain/keys.js';
import type { Queryable } from './db.js';
import type { SecretBox } from '../kek.js';
import { openSecret } from './sealed-secrets.js';
import { scopeParam, type SiteScope } from './scope.js';

/**
 * The `keys` and `key_history` tables: the verbs' load / insert / compare-and-set
 * and history, and the reads of the admin API (scoped to the caller's sites
 * through the key's gateway). Rows read back are validated like any other
 * boundary input: a bad row is CorruptRow, never a half-built key.
 */
const KeyRow = z
  .object({
    id: KeyId,
    person_id: PersonId,
    gateway_id: GatewayId,
    credential_type: CredentialType,
    credential_digest: z.string().regex(/^[A-Za-z0-9_-]{43}$/),
    doors: z.array(DoorId).min(1),
    valid_from: z.number().int(),
    valid_until: z.number().int(),
    schedule: Schedule.nullable(),
    offline_capable: z.boolean(),
    offline_max_seconds: z.number().int().positive().nullable(),
    one_time: z.boolean(),
    staff: z.boolean(),
    used_at: z.number().int().nullable(),
    version: z.number().int().positive(),
    revision: z.number().int().positive(),
    status: z.enum(KEY_STATUSES),
    revoke_reason: RevokeReason.nullable(),
    last_code: z.string(),
    cid: CorrelationId,
    created_at: z.number().int(),
    updated_at: z.number().int(),
  })
  .transform((r): EntryKey => ({
    id: r.id,
    personId: r.person_id,
    gatewayId: r.gateway_id,
    credential: { type: r.credential_type, digest: r.credential_digest },
    doors: r.doors,
    validFrom: r.valid_from,
    validUntil: r.valid_until,
    schedule: r.schedule,
    offlineCapable: r.offline_capable,
    offlineMaxSeconds: r.offline_max_seconds,
    oneTime: r.one_time,
    staff: r.staff || r.offline_capable,
    usedAt: r.used_at,
    version: r.version,
    revision: r.revision,
    status: r.status,
    revokeReason: r.revoke_reason,
    lastCode: r.last_code,
    cid: r.cid,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  }));

export function keyFromRow(row: unknown): EntryKey {
  return parseRow('keys', KeyRow, row);
}

/**
 * A verb's first statement: sets the transaction's verb marker (`enterVerb`,
 * which the verb guard checks) and loads the key, in one round trip (the
 * marker is set whether or not the key exists: a one-row subquery joined to
 * it). Also answers the marker it replaced ('' when none), which a key verb
 * running inside another verb's transaction gives back when it is done.
 */
export async function enterVerbAndLoadKey(q: Queryable, verb: string, id: string): Promise<{ key: EntryKey | null; outerVerb: string }> {
  const r = await q.query(
    // OFFSET 0 keeps the read of the old marker in its own plan node, evaluated before the set
    `SELECT k.*, v.outer_verb FROM (SELECT o.outer_verb, set_config('tobira.verb', $2, true)
       FROM (SELECT coalesce(current_setting('tobira.verb', true), '') AS outer_verb OFFSET 0) o) v LEFT JOIN keys k ON k.id = $1`,
    [id, verb],
  );
  const row = r.rows[0] as { id: unknown; outer_verb: string } | undefined;
  if (row === undefined) return { key: null, outerVerb: '' };
  const { outer_verb: outerVerb, ...key } = row;
  return { key: key.id === null ? null : keyFromRow(key), outerVerb };
}

/** Whether a key has this id (what an insert that wrote nothing ran into: the id, or else the live credential). */
export async function keyExists(q: Queryable, id: string): Promise<boolean> {
  const r = await q.query('SELECT 1 FROM keys WHERE id = $1', [id]);
  return r.rowCount > 0;
}

export async function loadKey(q: Queryable, id: string): Promise<EntryKey | null> {
  const r = await q.query('SELECT * FROM keys WHERE id = $1', [id]);
  return r.rows[0] === undefined ? null : keyFromRow(r.rows[0]);
}

/**
 * Insert of a new key; 0 rows means the id already exists or another live key
 * of the gateway holds the credential (`keys_live_credential`), judged by
 * rowCount, not by an exception: a verb inside a caller's transaction has no
 * savepoint to roll an error back to (`keyExists` tells the two apart).
 */
export async function insertKey(q: Queryable, k: EntryKey): Promise<number> {
  const r = await q.query(
    `INSERT INTO keys (id, person_id, gateway_id, credential_type, credential_digest, doors, valid_from, valid_until,
       schedule, offline_capable, version, revision, status, revoke_reason, last_code, cid, created_at, updated_at, offline_max_seconds,
       one_time, used_at, staff)
     VALUES ($1,$2,$3,$4,$5,$6::jsonb,$7,$8,$9::jsonb,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22)
     ON CONFLICT DO NOTHING`,
    [
      k.id,
      k.personId,
      k.gatewayId,
      k.credential.type,
      k.credential.digest,
      JSON.stringify(k.doors),
      k.validFrom,
      k.validUntil,
      k.schedule === null ? null : JSON.stringify(k.schedule),
      k.offlineCapable,
      k.version,
      k.revision,
      k.status,
      k.revokeReason,
      k.lastCode,
      k.cid,
      k.createdAt,
      k.updatedAt,
      k.offlineMaxSeconds,
      k.oneTime,
      k.usedAt,
      k.staff === true || k.offlineCapable,
    ],
  );
  return r.rowCount;
}

/** Compare-and-set on the row revision: 1 row = we won, 0 rows = someone changed the key first. */
export async function casKey(q: Queryable, k: EntryKey, expectedRevision: number): Promise<number> {
  const r = await q.query(
    `UPDATE keys SET status = $3, version = $4, revision = $5, revoke_reason = $6, last_code = $7, cid = $8, updated_at = $9, used_at = $10
     WHERE id = $1 AND revision = $2`,
    [k.id, expectedRevision, k.status, k.version, k.revision, k.revokeReason, k.lastCode, k.cid, k.updatedAt, k.usedAt],
  );
  return r.rowCount;
}

export { enterVerb } from './db.js';

/** Whether another live key of the gateway already holds this credential. */
export async function credentialInUse(q: Queryable, gatewayId: string, digest: string, exceptKeyId: string): Promise<boolean> {
  const r = await q.query(
    `SELECT 1 FROM keys WHERE gateway_id = $1 AND credential_digest = $2 AND status IN ('issuing','active') AND id <> $3`,
    [gatewayId, digest, exceptKeyId],
  );
  return r.rowCount > 0;
}

/** Ids of live keys whose window has ended at `now`, soonest first. */
/** The live keys (issuing or active) of a person at a site's gateways: what blocking the person there revokes. */
export async function liveKeysOfPersonAtSite(q: Queryable, siteId: string, personId: string): Promise<string[]> {
  const r = await q.query<{ id: string }>(
    `SELECT k.id FROM keys k JOIN gateways g ON g.id = k.gateway_id
      WHERE g.site_id = $1 AND k.person_id = $2 AND k.status IN ('issuing', 'active') ORDER BY k.id`,
    [siteId, personId],
  );
  return r.rows.map((x) => x.id);
}

export async function keysDueToExpire(q: Queryable, now: number, limit: number): Promise<string[]> {
  const r = await q.query("SELECT id FROM keys WHERE status IN ('issuing','active') AND valid_until <= $1 ORDER BY valid_until LIMIT $2", [
    now,
    limit,
  ]);
  return parseRows('keys', z.object({ id: z.string() }), r.rows).map((x) => x.id);
}

/** The keys a gateway's snapshot is made of: live ones (grants), and revoked and used ones (tombstones). */
export async function keysForSnapshot(q: Queryable, gatewayId: string): Promise<EntryKey[]> {
  const r = await q.query(
    `SELECT * FROM keys WHERE gateway_id = $1 AND status IN ('issuing','active','revoking','revoked','used') ORDER BY id`,
    [gatewayId],
  );
  return parseRows('keys', KeyRow, r.rows);
}

// ---------------------------------------------------------------- history

export interface HistoryRow {
  readonly keyId: string;
  readonly version: number;
  readonly revision: number;
  readonly event: (typeof KEY_EVENTS)[number];
  readonly fromStatus: KeyStatus | null;
  readonly toStatus: KeyStatus;
  readonly reason: string | null;
  readonly code: string;
  readonly cid: string;
  readonly verb: string;
  readonly detail: Record<string, unknown> | null;
  readonly at: number;
}

const HistoryRowSchema = z
  .object({
    key_id: z.string(),
    version: z.number().int(),
    revision: z.number().int(),
    event: z.enum(KEY_EVENTS),
    from_status: z.enum(KEY_STATUSES).nullable(),
    to_status: z.enum(KEY_STATUSES),
    reason: z.string().nullable(),
    code: z.string(),
    cid: z.string(),
    verb: z.string(),
    detail: z.record(z.string(), z.unknown()).nullable(),
    at: z.number().int(),
  })
  .transform((r): HistoryRow => ({
    keyId: r.key_id,
    version: r.version,
    revision: r.revision,
    event: r.event,
    fromStatus: r.from_status,
    toStatus: r.to_status,
    reason: r.reason,
    code: r.code,
    cid: r.cid,
    verb: r.verb,
    detail: r.detail,
    at: r.at,
  }));

export async function appendHistory(q: Queryable, h: HistoryRow): Promise<void> {
  await q.query(
    `INSERT INTO key_history (key_id, version, revision, event, from_status, to_status, reason, code, cid, verb, detail, at)
     VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11::jsonb,$12)`,
    [
      h.keyId,
      h.version,
      h.revision,
      h.event,
      h.fromStatus,
      h.toStatus,
      h.reason,
      h.code,
      h.cid,
      h.verb,
      h.detail === null ? null : JSON.stringify(h.detail),
      h.at,
    ],
  );
}

/** A key's history, one row per transition, oldest first. With a scope, a key of another site has none. */
export async function listHistory(q: Queryable, keyId: string, scope: SiteScope = null): Promise<HistoryRow[]> {
  const r = await q.query(
    `SELECT h.* FROM key_history h WHERE h.key_id = $1
        AND ($2::text[] IS NULL OR EXISTS (SELECT 1 FROM keys k JOIN gateways g ON g.id = k.gateway_id WHERE k.id = h.key_id AND g.site_id = ANY($2)))
      ORDER BY h.revision`,
    [keyId, scopeParam(scope)],
  );
  return parseRows('key_history', HistoryRowSchema, r.rows);
}

// ---------------------------------------------------------------- the admin API's view

/** A key as the admin API lists it: its site, the credential's type and never its digest. */
export interface KeySummary {
  readonly id: string;
  readonly siteId: string;
  readonly personId: string;
  readonly gatewayId: string;
  readonly credentialType: string;
  readonly doors: string[];
  readonly validFrom: number;
  readonly validUntil: number;
  readonly schedule: unknown;
  readonly offlineCapable: boolean;
  readonly offlineMaxSeconds: number | null;
  readonly oneTime: boolean;
  readonly staff: boolean;
  readonly usedAt: number | null;
  readonly version: number;
  readonly revision: number;
  readonly status: KeyStatus;
  readonly revokeReason: string | null;
  readonly lastCode: string;
  readonly cid: string;
  readonly createdAt: number;
  readonly updatedAt: number;
}

/** The summary of a key at a gateway of `siteId`. */
export function summaryOf(k: EntryKey, siteId: string): KeySummary {
  const { credential, doors, ...rest } = k;
  return { ...rest, staff: k.staff === true || k.offlineCapable, doors: [...doors], siteId, credentialType: credential.type };
}

const ScopedKeyRow = z.object({ site_id: z.string() }).passthrough();

function summaryFromRow(row: unknown): KeySummary {
  const { site_id: siteId } = parseRow('keys', ScopedKeyRow, row);
  return summaryOf(keyFromRow(row), siteId);
}

/** A key visible to the scope, or null (absent or of another site). */
export async function getKeySummary(q: Queryable, scope: SiteScope, id: string): Promise<KeySummary | null> {
  const r = await q.query(
    'SELECT k.*, g.site_id FROM keys k JOIN gateways g ON g.id = k.gateway_id WHERE k.id = $2 AND ($1::text[] IS NULL OR g.site_id = ANY($1))',
    [scopeParam(scope), id],
  );
  return r.rows[0] === undefined ? null : summaryFromRow(r.rows[0]);
}

export type KeyFilter = PageQuery<{ siteId: string; personId: string; gatewayId: string; status: string }, [number, string]>;

/** Keys oldest first, keyset-paginated on (created_at, id). */
export async function listKeys(q: Queryable, scope: SiteScope, f: KeyFilter): Promise<Page<KeySummary>> {
  const r = await q.query(
    `SELECT k.*, g.site_id FROM keys k JOIN gateways g ON g.id = k.gateway_id
      WHERE ($1::text[] IS NULL OR g.site_id = ANY($1)) AND ($2::text IS NULL OR g.site_id = $2) AND ($3::text IS NULL OR k.person_id = $3)
        AND ($4::text IS NULL OR k.gateway_id = $4) AND ($5::text IS NULL OR k.status = $5)
        AND ($6::bigint IS NULL OR (k.created_at, k.id) > ($6::bigint, $7::text))
      ORDER BY k.created_at, k.id LIMIT $8`,
    [
      scopeParam(scope),
      f.siteId ?? null,
      f.personId ?? null,
      f.gatewayId ?? null,
      f.status ?? null,
      f.cursor?.[0] ?? null,
      f.cursor?.[1] ?? null,
      f.limit + 1,
    ],
  );
  return pageOf(r.rows.map(summaryFromRow), f.limit, (k) => [k.createdAt, k.id]);
}

// ---------------------------------------------------------------- what an issue needs

/** A door an issue names, with its gateway, that gateway's site, presence and credential pepper. */
export interface IssueDoor {
  readonly id: string;
  readonly gatewayId: string;
  readonly siteId: string;
  /** The gateway's presence as last recorded (null: never heard from). */
  readonly gatewayOnline: boolean | null;
  readonly pepper: string;
}

const IssueTargetRow = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('person'), id: z.string(), name: z.string() }),
  z.object({
    kind: z.literal('door'),
    id: z.string(),
    name: z.string(),
    gateway_id: z.string(),
    site_id: z.string(),
    online: z.boolean().nullable(),
    pepper: z.string().nullable(),
    pepper_sealed: z.string().nullable(),
  }),
]);

/**
 * In one read: whether the person exists, and which of the doors exist, both
 * as the scope sees them (a person created for, or holding a key at, one of
 * its sites; a door of one of its sites), with the names their grants carry
 * (the same as `grantNames` of the targets found) and what the key's reply
 * shows of its gateway: an issue makes no other read before its transaction,
 * and none after its outbox row.
 */
export async function issueTargets(
  q: Queryable,
  box: SecretBox,
  scope: SiteScope,
  personId: string,
  doorIds: readonly string[],
): Promise<{ personFound: boolean; doors: IssueDoor[]; names: GrantNames }> {
  const r = await q.query(
    `SELECT 'person' AS kind, p.id, p.name, NULL AS gateway_id, NULL AS site_id, NULL::boolean AS online, NULL AS pepper, NULL AS pepper_sealed
       FROM people p WHERE p.id = $1 AND ($3::text[] IS NULL
        OR EXISTS (SELECT 1 FROM api_person_sites ps WHERE ps.person_id = p.id AND ps.site_id = ANY($3))
        OR EXISTS (SELECT 1 FROM keys k JOIN gateways g ON g.id = k.gateway_id WHERE k.person_id = p.id AND g.site_id = ANY($3)))
     UNION ALL
     SELECT 'door', d.id, d.name, d.gateway_id, g.site_id, g.online, g.credential_pepper, g.credential_pepper_sealed FROM doors d JOIN gateways g ON g.id = d.gateway_id
      WHERE d.id = ANY($2::text[]) AND ($3::text[] IS NULL OR d.site_id = ANY($3))`,
    [personId, [...doorIds], scopeParam(scope)],
  );
  const rows = parseRows('doors', IssueTargetRow, r.rows);
  const doors = rows.flatMap((x) =>
    x.kind === 'door'
      ? [
          {
            id: x.id,
            name: x.name,
            gatewayId: x.gateway_id,
            siteId: x.site_id,
            gatewayOnline: x.online,
            // opened here, in the one read an issue makes: a pepper that does not open throws SecretUnreadable
            pepper: openSecret(box, 'gateways.credential_pepper', x.gateway_id, x.pepper_sealed, x.pepper),
          },
        ]
      : [],
  );
  return {
    personFound: rows.some((x) => x.kind === 'person'),
    doors: doors.map(({ name: _name, ...d }) => d),
    names: {
      people: new Map(rows.flatMap((x) => (x.kind === 'person' ? [[x.id, x.name] as const] : []))),
      doors: new Map(doors.map((d) => [d.id, d.name] as const)),
    },
  };
}

/**
 * The display names grants carry (domain/keys.ts GrantNames): the people's
 * and doors' names of these keys, in one query. Read outside the key's
 * transaction: a name is for the staff UI only, never for a decision.
 */
export async function grantNames(q: Queryable, keys: readonly { personId: string; doors: readonly string[] }[]): Promise<GrantNames> {
  if (keys.length === 0) return { people: new Map(), doors: new Map() };
  const r = await q.query(
    `SELECT 'person' AS kind, id, name FROM people WHERE id = ANY($1::text[])
     UNION ALL SELECT 'door', id, name FROM doors WHERE id = ANY($2::text[])`,
    [[...new Set(keys.map((k) => k.personId))], [...new Set(keys.flatMap((k) => k.doors))]],
  );
  const rows = parseRows('people', NameRow, r.rows);
  return {
    people: new Map(rows.filter((x) => x.kind === 'person').map((x) => [x.id, x.name])),
    doors: new Map(rows.filter((x) => x.kind === 'door').map((x) => [x.id, x.name])),
  };
}
const NameRow = z.object({ kind: z.enum(['person', 'door']), id: z.string(), name: z.string() });
