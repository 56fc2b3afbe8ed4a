import { CorruptRow, DATE_PATTERN, HHMM_PATTERN, parseRow, type CredentialType, type KeyGrant } from '@tobira/shared';
import { z } from 'zod';
import { STORED_KEY_STATUSES, type StoredKey } from '../../domain/keyset.js';
import { knownTimeZone } from '../../domain/schedule.js';

/**
 * A `keys` row read back (keyset.ts's `loadSlot`, and memory.ts's load of the
 * in-memory key set the decision reads).
 *
 * A grant is validated with the full `KeyGrant` schema once, when it arrives
 * (the inbox verifies the message); the row stores that grant. Reading it
 * back ran on every decision before the key set was held in memory, and
 * still runs per key at start and per apply, so it is not parsed with zod again (the
 * profile showed that, with the time zone's Intl check, as the decision's
 * largest avoidable cost): a structural check of what the decision and the
 * apply rules read stands in, and a row that does not fit is still a
 * `CorruptRow`.
 */
const CREDENTIAL_TYPES: readonly unknown[] = ['pin', 'card', 'mobile'] satisfies CredentialType[];
const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isText = (v: unknown): v is string => typeof v === 'string' && v.length > 0;
const isInt = (v: unknown, min: number): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= min;
const isDay = (v: unknown) => isInt(v, 0) && v <= 6;
const isDate = (v: unknown) => typeof v === 'string' && DATE_PATTERN.test(v);
const isList = (v: unknown, item: (x: unknown) => boolean) => Array.isArray(v) && v.length > 0 && v.every(item);
const isWindow = (w: unknown) =>
  isRecord(w) &&
  (w.days !== undefined || w.dates !== undefined) &&
  (w.days === undefined || isList(w.days, isDay)) &&
  (w.dates === undefined || isList(w.dates, isDate)) &&
  typeof w.start === 'string' &&
  HHMM_PATTERN.test(w.start) &&
  typeof w.end === 'string' &&
  HHMM_PATTERN.test(w.end);
const isSchedule = (s: unknown) =>
  s === null ||
  (isRecord(s) &&
    isText(s.timeZone) &&
    knownTimeZone(s.timeZone) &&
    Array.isArray(s.windows) &&
    s.windows.length > 0 &&
    s.windows.every(isWindow));

function isStoredGrant(g: unknown): g is KeyGrant {
  return (
    isRecord(g) &&
    isText(g.keyId) &&
    isInt(g.version, 1) &&
    isText(g.personId) &&
    isRecord(g.credential) &&
    CREDENTIAL_TYPES.includes(g.credential.type) &&
    isText(g.credential.digest) &&
    Array.isArray(g.doors) &&
    g.doors.length > 0 &&
    g.doors.every(isText) &&
    isInt(g.validFrom, 0) &&
    isInt(g.validUntil, 0) &&
    isSchedule(g.schedule) &&
    typeof g.offlineCapable === 'boolean' &&
    (g.offlineMaxSeconds === undefined || isInt(g.offlineMaxSeconds, 1)) &&
    (g.oneTime === undefined || g.oneTime === true) &&
    (g.staff === undefined || typeof g.staff === 'boolean')
  );
}

const KeyRowShape = z.object({ version: z.int(), status: z.enum(STORED_KEY_STATUSES), grant_json: z.string() });

export function storedKey(raw: unknown): StoredKey {
  // the three columns by hand too: this runs per candidate key per decision
  if (
    !isRecord(raw) ||
    !isInt(raw.version, 0) ||
    (raw.status !== 'active' && raw.status !== 'revoked') ||
    typeof raw.grant_json !== 'string'
  )
    return corruptKey(raw);
  let grant: unknown;
  try {
    grant = JSON.parse(raw.grant_json);
  } catch {
    throw new CorruptRow('keys', 'grant_json: not JSON');
  }
  if (!isStoredGrant(grant)) throw new CorruptRow('keys', 'grant_json: not a key grant');
  let consumedAt: number | undefined;
  if (raw.consumed_at !== undefined && raw.consumed_at !== null) {
    if (!isInt(raw.consumed_at, 0)) throw new CorruptRow('consumed_keys', 'at: not a time');
    consumedAt = raw.consumed_at;
  }
  return {
    grant,
    version: raw.version,
    status: raw.status,
    ...(raw.signer_retired === 1 ? { signerRetired: true } : {}),
    ...(consumedAt === undefined ? {} : { consumedAt }),
  };
}
/** Names the columns that do not fit, as parseRow would. */
function corruptKey(raw: unknown): never {
  parseRow('keys', KeyRowShape, raw);
  throw new CorruptRow('keys', 'not a key row');
}
