import { randomBytes, randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { createLogger, generateSigningKeyPair, newCorrelationId, withCorrelation } from '@tobira/shared';
import type { Queryable } from './adapters/db/db.js';
import { migrate } from './adapters/db/migrate.js';
import { openDb } from './adapters/db/open.js';
import { derivedKid, parseConfig } from './config.js';
import { createApiToken } from './adapters/db/tokens.js';
import { resealSecrets } from './adapters/db/sealed-secrets.js';
import { loadSecretBox } from './adapters/kek.js';
import { WEBHOOK_EVENTS } from './adapters/webhooks/events.js';

/**
 * Operator CLI for the admin HTTP API (docs/api.md):
 * `npm run admin -w @tobira/cloud -- keys issue ...`. It calls the API at
 * TOBIRA_API with the token TOBIRA_TOKEN, prints the JSON answer and exits 0
 * on 2xx, 1 otherwise. Every POST carries an Idempotency-Key (random, or
 * --idempotency-key to retry safely). Only `tokens bootstrap` talks to the
 * database directly: it makes the first admin token.
 */
const HELP = `usage: npm run admin -w @tobira/cloud -- <command> [options]
env: TOBIRA_API (e.g. http://127.0.0.1:8080), TOBIRA_TOKEN (bearer token)

  sites list | sites get <id> | sites create --name N [--id ID] [--tz Asia/Tokyo] [--grace SECONDS]
  gateways list [--site S] | gateways get <id> | gateways register --id GW --site S --jwk-file public.jwk.json
  gateways rotate-uplink-key --id GW   rotate the gateway's own uplink signing key (409 while one is in progress)
  gateways uplink-key-rotations <id>   its rotations, newest first
  doors list [--site S] [--gateway GW] | doors get <id> | doors create --gateway GW --name N [--id ID]
  people list [--site S] | people get <id> | people create --name N --site S [--id ID]
  keys issue --person P --door D [--door D2 ...] (--pin V | --card V | --mobile V) --from T --until T [--id ID] [--offline [--offline-max SECONDS]]
             [--one-time] [--staff] [--tz ZONE --window WHEN@HH:MM-HH:MM [--window ...]]
                                --one-time: opens for its first entry only. --staff: kept out of rooms with privacy on. --window: a schedule window in --tz (the site's
                                zone); WHEN: week days and/or dates, comma-separated (mon-fri, sat,sun, 0-6, 2026-12-24);
                                an end before the start runs overnight (fri@22:00-06:00 ends Saturday 06:00)
  keys mobile-token --id K [--ttl SECONDS]   a short-lived signed token for the key's phone (POST /keys/{id}/mobile-token)
  keys revoke <id> --reason R [--if-match REVISION]
  keys get <id> | keys history <id> | keys list [--site S] [--person P] [--gateway GW] [--status ST] [--limit N] [--cursor C]
  events [--site S] [--gateway GW] [--door D] [--person P] [--key K] [--code C] [--from T] [--until T] [--limit N] [--cursor C]
  dead-letters list [--site S] [--gateway GW] | dead-letters retry <id>
  alarms [--site S] [--gateway GW] [--lock L] [--kind K] [--open | --acknowledged] [--from T] [--until T] [--limit N] [--cursor C]
  alarms ack <alarmId>          acknowledge an alarm (a second ack answers noop ALARM_ALREADY_ACKED)
  rejected-uplinks [--gateway GW] [--code C] [--from T] [--until T] [--limit N] [--cursor C]
  gateway health <id>           presence, lease left, applied vs handed-out seq, outbox depth, clock skew, failing closed
  tokens create --name N --role admin|manager|auditor [--site S ...] [--expires-in-days N] | tokens list | tokens revoke <id>
  tokens rotate <id> [--grace-seconds N] [--expires-in-days N]   new token, same role and sites, shown once; the old one
                                works N more seconds (default 3600; 0: revoked now). Any token may rotate itself.
  webhooks create --site S --url URL --event ${WEBHOOK_EVENTS.join('|')} [--event ...] | webhooks list [--site S]
  webhooks deliveries <id> | webhooks disable <id>
  stays list [--site S] [--status ST] [--limit N] [--cursor C] | stays get <id> | stays payments <id>
  stays book --person P --room R --check-in DATE --check-out DATE --amount N --currency jpy [--deposit N]
                                DATE: the site-local date (2027-03-01); the answer carries the guest's payment.clientSecret
  stays cancel <id> --reason R | stays check-in <id> | stays check-out <id>
  billing dead-letters [--kind webhook-events|billing-jobs] [--site S] [--limit N] [--cursor C]   without --kind both lists;
                                scoped by the token's sites like every list
  plans create --site S --name N --amount N --currency jpy --interval day|week|month|year --door D [--door D2 ...]
                                [--id ID] [--interval-count N] [--members-only] [--quota N] [--grace-seconds N]
  plans list [--site S] [--status active|retired] [--limit N] [--cursor C] | plans get <id> | plans retire <id>
  memberships apply --plan P --person P [--id ID] [--pin V | --card V]
  memberships approve <id>      Stripe first: the subscription and its open first invoice
  memberships reject <id> [--note N] [--version V] | memberships self-cancel <id> [--version V]
  memberships force-cancel <id> --note N [--version V]   billing stops in Stripe first, then the membership ends
  memberships list [--site S] [--plan P] [--person P] [--status ST] [--limit N] [--cursor C] | memberships get <id>
  billing retry <webhook-events|billing-jobs> <id>   a dead Stripe event or billing job back to pending (admin only)
  notifications list [--site S] [--status pending|sending|sent|dead] [--template T] [--person P] [--limit N] [--cursor C]
  notifications show <id> | notifications retry <id>   a dead notification back to pending (admin, manager of its site)
  people contact <id> [--email E|--email ''] [--locale ja|en|'']   where and in which language a person is told ('' clears)
  sites locale <id> --locale ja|en|''   the site's fallback language for its people with none
  walk-ins create --site S --plan P --person P (--pin V | --card V) [--id ID]   the check-in gates, one quota use, then
                                the PaymentIntent (purpose walk_in): 422 with the gate's code, or 202 pending with clientSecret
  walk-ins get <id> | walk-ins list [--site S] [--person P] [--status ST] | walk-ins cancel <id> --reason R
  people block <id> --site S --reason R | people unblock <id> --site S | people blocked --site S   check-ins: GUEST_BLOCKED
  plans quota <plan id> [--person P] [--month YYYY-MM]   the plan's monthly quota uses (the site's calendar month)
  (plans create also takes --walk-in-amount N: the price of a walk-in day pass; stays check-in passes the gates too)
  tokens bootstrap --name N [--expires-in-days N]   direct to the database (DATABASE_URL or PGLITE_DATA_DIR): prints a new
                                admin token once; it never expires unless --expires-in-days (rotate it once you have others)
  secrets new-kek [--kid ID]    prints a new key-encryption key (no API call): 32 random bytes, base64, as a TOBIRA_KEKS entry
                                (default kid: the one TOBIRA_KEK derives from the key)
  secrets rotate [--batch N] [--limit N]   direct to the database (DATABASE_URL or PGLITE_DATA_DIR, the KEK ring TOBIRA_KEKS):
                                re-encrypts every stored secret under the ring's first KEK, in batches of N (default 100),
                                progress on stderr; resumable and idempotent (stop it anywhere, run it again); --limit: at most
                                N rows this run. Exit 0 once none is left under another KEK (docs/operations.md "Rotating the KEK")
  signing list                  the cloud signing keys: staged / published / signing / previous / retired, deliveries
  signing rotate add            prints a new Ed25519 private JWK (no API call): add it to CLOUD_SIGNING_JWK on every
                                replica and restart them; the cloud registers it as staged (docs/operations.md)
  signing rotate publish <kid>  JWKS + a keyset.update adding it for every gateway (run again to re-send to late ones)
  signing rotate switch <kid> [--retire-after-seconds N]   sign with it (refused until every gateway applied the publish)
  signing rotate resign         queue every live grant again under the current signing key
                                (<kid> may be given as --kid=KID, for a kid starting with '-')
  signing rotate retire <kid>   retire the previous signer: a keyset.update retiring it for every gateway
options: --idempotency-key K, --cid CORRELATION_ID
times (T): ISO 8601 (2026-01-01T00:00:00Z) or epoch milliseconds`;

export interface CliIo {
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly out: (s: string) => void;
  readonly err: (s: string) => void;
  readonly fetch?: typeof fetch;
  /** Tests: the database `tokens bootstrap` and `secrets rotate` write to (default: opened from the environment). */
  readonly db?: Queryable;
}

class Usage extends Error {}

function time(v: string | undefined, name: string): number | undefined {
  if (v === undefined) return undefined;
  if (/^\d+$/.test(v)) return Number(v);
  const t = Date.parse(v);
  if (Number.isNaN(t)) throw new Usage(`--${name}: not a time: ${v}`);
  return t;
}

/** A non-negative whole number option (the server checks its range). */
function count(v: string | undefined, name: string): number | undefined {
  if (v === undefined) return undefined;
  if (!/^\d{1,9}$/.test(v)) throw new Usage(`--${name}: not a whole number: ${v}`);
  return Number(v);
}

function usage(message: string): never {
  throw new Usage(message);
}

const DAY_NAMES = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];
const FULL_DAY_NAMES = ['sunday', 'monday', 'tuesday', 'wednesday', 'thursday', 'friday', 'saturday'];

/** A week day as the API numbers it (0 = Sunday): 0..6, sun..sat or sunday..saturday. */
function dayOf(v: string, spec: string): number {
  if (/^[0-6]$/.test(v)) return Number(v);
  const lower = v.toLowerCase();
  const i = Math.max(DAY_NAMES.indexOf(lower), FULL_DAY_NAMES.indexOf(lower));
  if (i < 0) throw new Usage(`--window ${spec}: not a week day: ${v}`);
  return i;
}

/**
 * `--window WHEN@HH:MM-HH:MM` → one schedule window (the API's shape; the
 * server checks the rules). WHEN: comma-separated week days (sun..sat or 0..6,
 * ranges like mon-fri; fri-mon wraps) and dates (YYYY-MM-DD). An end before
 * the start is an overnight window, as the API reads it.
 */
export function parseWindow(spec: string): { days?: number[]; dates?: string[]; start: string; end: string } {
  const m = /^([^@]+)@(\d{2}:\d{2})-(\d{2}:\d{2})$/.exec(spec.trim());
  if (m === null) throw new Usage(`--window ${spec}: expected WHEN@HH:MM-HH:MM (for example mon-fri@08:00-20:00)`);
  const [, when = '', start = '', end = ''] = m;
  const days = new Set<number>();
  const dates: string[] = [];
  for (const part of when.split(',').map((x) => x.trim())) {
    if (/^\d{4}-\d{2}-\d{2}$/.test(part)) dates.push(part);
    else if (part.includes('-')) {
      const [a = '', b = ''] = part.split('-');
      const from = dayOf(a, spec);
      const to = dayOf(b, spec);
      for (let d = from; ; d = (d + 1) % 7) {
        days.add(d);
        if (d === to) break;
      }
    } else days.add(dayOf(part, spec));
  }
  return {
    ...(days.size > 0 ? { days: [...days].sort((a, b) => a - b) } : {}),
    ...(dates.length > 0 ? { dates } : {}),
    start,
    end,
  };
}

function schedule(tz: string | undefined, windows: readonly string[]) {
  return { timeZone: need(tz, '--tz (the schedule time zone, e.g. Asia/Tokyo)'), windows: windows.map(parseWindow) };
}

function need<T>(v: T | undefined, what: string): T {
  if (v === undefined || v === '') throw new Usage(`missing ${what}`);
  return v;
}

const query = (q: Record<string, string | number | undefined>): string => {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) if (v !== undefined) p.set(k, String(v));
  const s = p.toString();
  return s ? `?${s}` : '';
};

/** Runs one CLI invocation; returns the process exit code. */
export async function runAdminCli(argv: readonly string[], io: CliIo): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      allowPositionals: true,
      options: {
        name: { type: 'string' },
        id: { type: 'string' },
        tz: { type: 'string' },
        grace: { type: 'string' },
        site: { type: 'string', multiple: true },
        gateway: { type: 'string' },
        'jwk-file': { type: 'string' },
        door: { type: 'string', multiple: true },
        person: { type: 'string' },
        key: { type: 'string' },
        pin: { type: 'string' },
        card: { type: 'string' },
        mobile: { type: 'string' },
        from: { type: 'string' },
        until: { type: 'string' },
        offline: { type: 'boolean' },
        'offline-max': { type: 'string' },
        'one-time': { type: 'boolean' },
        staff: { type: 'boolean' },
        window: { type: 'string', multiple: true },
        ttl: { type: 'string' },
        reason: { type: 'string' },
        'if-match': { type: 'string' },
        status: { type: 'string' },
        code: { type: 'string' },
        limit: { type: 'string' },
        batch: { type: 'string' },
        cursor: { type: 'string' },
        role: { type: 'string' },
        'expires-in-days': { type: 'string' },
        'grace-seconds': { type: 'string' },
        url: { type: 'string' },
        event: { type: 'string', multiple: true },
        'idempotency-key': { type: 'string' },
        cid: { type: 'string' },
        lock: { type: 'string' },
        kind: { type: 'string' },
        room: { type: 'string' },
        'check-in': { type: 'string' },
        'check-out': { type: 'string' },
        amount: { type: 'string' },
        currency: { type: 'string' },
        deposit: { type: 'string' },
        plan: { type: 'string' },
        interval: { type: 'string' },
        'interval-count': { type: 'string' },
        'members-only': { type: 'boolean' },
        quota: { type: 'string' },
        note: { type: 'string' },
        version: { type: 'string' },
        open: { type: 'boolean' },
        acknowledged: { type: 'boolean' },
        template: { type: 'string' },
        email: { type: 'string' },
        locale: { type: 'string' },
        'retire-after-seconds': { type: 'string' },
        kid: { type: 'string' },
        'walk-in-amount': { type: 'string' },
        month: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (e) {
    io.err(`${e instanceof Error ? e.message : String(e)}\n${HELP}`);
    return 2;
  }
  const { values: o, positionals } = parsed;
  const [group, verb, arg] = positionals;
  if (o.help || group === undefined || group === 'help') {
    io.out(HELP);
    return 0;
  }
  const site = o.site?.[0];
  let expiresInDays: number | undefined;
  let graceSeconds: number | undefined;
  try {
    expiresInDays = count(o['expires-in-days'], 'expires-in-days');
    graceSeconds = count(o['grace-seconds'], 'grace-seconds');
  } catch (e) {
    io.err(`${e instanceof Error ? e.message : String(e)}\n${HELP}`);
    return 2;
  }
  const lifetime = expiresInDays !== undefined ? { expiresInDays } : {};

  try {
    if (group === 'tokens' && verb === 'bootstrap') return await bootstrap(io, need(o.name, '--name'));
    if (group === 'secrets' && verb === 'new-kek') {
      // local: the key never travels anywhere; the operator puts it first in TOBIRA_KEKS on every replica
      const raw = randomBytes(32);
      // the kid TOBIRA_KEK would derive: the key may later stand alone in TOBIRA_KEK under the same id
      const kid = o.kid ?? derivedKid(raw);
      const key = raw.toString('base64');
      io.out(JSON.stringify({ kid, key, entry: `${kid}:${key}` }, null, 2));
      io.err(
        'put entry first in TOBIRA_KEKS (the current KEK after it) on every replica, restart them, then: secrets rotate; drop the old KEK once it exits 0',
      );
      return 0;
    }
    if (group === 'secrets' && verb === 'rotate')
      return await rotateSecrets(io, { batch: count(o.batch, 'batch') ?? 100, limit: count(o.limit, 'limit') });
    if (group === 'signing' && verb === 'rotate' && arg === 'add') {
      // local: the private key never travels to the API; the operator puts it in CLOUD_SIGNING_JWK
      const pair = await generateSigningKeyPair();
      io.out(JSON.stringify({ kid: pair.kid, privateJwk: pair.privateJwk }, null, 2));
      io.err(
        `add privateJwk to CLOUD_SIGNING_JWK (a JSON array, the current keys first) on every replica, restart them, then: signing rotate publish ${pair.kid}`,
      );
      return 0;
    }

    const api = need(io.env.TOBIRA_API, 'TOBIRA_API').replace(/\/$/, '');
    const token = need(io.env.TOBIRA_TOKEN, 'TOBIRA_TOKEN');
    const doFetch = io.fetch ?? fetch;
    const call = async (
      method: 'GET' | 'POST' | 'PUT' | 'DELETE',
      path: string,
      body?: unknown,
      extra: Record<string, string> = {},
    ): Promise<number> => {
      const headers: Record<string, string> = { authorization: `Bearer ${token}`, ...extra };
      if (o.cid) headers['x-correlation-id'] = o.cid;
      if (method !== 'GET') {
        headers['idempotency-key'] = o['idempotency-key'] ?? randomUUID();
        if (body !== undefined) headers['content-type'] = 'application/json';
      }
      const res = await doFetch(`${api}${path}`, { method, headers, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
      const text = await res.text();
      let pretty = text;
      try {
        pretty = JSON.stringify(JSON.parse(text), null, 2);
      } catch {
        // not JSON: print as is
      }
      (res.ok ? io.out : io.err)(`${res.status} ${pretty}`);
      return res.ok ? 0 : 1;
    };
    const id = (what: string) => encodeURIComponent(need(arg, what));

    switch (`${group} ${verb ?? ''}`.trim()) {
      case 'sites list':
        return await call('GET', '/sites');
      case 'sites get':
        return await call('GET', `/sites/${id('<id>')}`);
      case 'sites create':
        return await call('POST', '/sites', {
          name: need(o.name, '--name'),
          ...(o.id ? { id: o.id } : {}),
          ...(o.tz ? { timeZone: o.tz } : {}),
          ...(o.grace ? { offlineGraceSeconds: Number(o.grace) } : {}),
        });
      case 'gateways list':
        return await call('GET', `/gateways${query({ siteId: site })}`);
      case 'gateways get':
        return await call('GET', `/gateways/${id('<id>')}`);
      case 'gateways register': {
        const jwk = JSON.parse(await readFile(need(o['jwk-file'], '--jwk-file'), 'utf8')) as unknown;
        return await call('POST', '/gateways', { gatewayId: need(o.id, '--id'), siteId: need(site, '--site'), publicJwk: jwk });
      }
      case 'gateways rotate-uplink-key':
        return await call('POST', `/gateways/${encodeURIComponent(need(o.id, '--id'))}/uplink-key/rotate`);
      case 'gateways uplink-key-rotations':
        return await call('GET', `/gateways/${id('<id>')}/uplink-key/rotations`);
      case 'doors list':
        return await call('GET', `/doors${query({ siteId: site, gatewayId: o.gateway })}`);
      case 'doors get':
        return await call('GET', `/doors/${id('<id>')}`);
      case 'doors create':
        return await call('POST', '/doors', {
          gatewayId: need(o.gateway, '--gateway'),
          name: need(o.name, '--name'),
          ...(o.id ? { id: o.id } : {}),
        });
      case 'people list':
        return await call('GET', `/people${query({ siteId: site })}`);
      case 'people get':
        return await call('GET', `/people/${id('<id>')}`);
      case 'people create':
        return await call('POST', '/people', { name: need(o.name, '--name'), siteId: need(site, '--site'), ...(o.id ? { id: o.id } : {}) });
      case 'keys issue': {
        const creds = (['pin', 'card', 'mobile'] as const).filter((k) => o[k] !== undefined);
        if (creds.length !== 1) throw new Usage('give exactly one of --pin, --card, --mobile');
        const type = creds[0] as 'pin' | 'card' | 'mobile';
        return await call('POST', '/keys', {
          personId: need(o.person, '--person'),
          doors: need(o.door, '--door'),
          credential: { type, value: o[type] },
          validFrom: need(time(o.from, 'from'), '--from'),
          validUntil: need(time(o.until, 'until'), '--until'),
          ...(o.id ? { keyId: o.id } : {}),
          ...(o.offline ? { offlineCapable: true } : {}),
          ...(o['offline-max'] ? { offlineMaxSeconds: Number(o['offline-max']) } : {}),
          ...(o['one-time'] ? { oneTime: true } : {}),
          ...(o.staff ? { staff: true } : {}),
          ...(o.window !== undefined ? { schedule: schedule(o.tz, o.window) } : o.tz !== undefined ? usage('--tz needs --window') : {}),
        });
      }
      case 'keys mobile-token': {
        const ttl = count(o.ttl, 'ttl');
        return await call(
          'POST',
          `/keys/${encodeURIComponent(need(o.id ?? arg, '--id'))}/mobile-token`,
          ttl === undefined ? {} : { ttlSeconds: ttl },
        );
      }
      case 'keys revoke':
        return await call(
          'POST',
          `/keys/${id('<id>')}/revoke`,
          { reason: need(o.reason, '--reason') },
          o['if-match'] ? { 'if-match': `"${o['if-match']}"` } : {},
        );
      case 'keys get':
        return await call('GET', `/keys/${id('<id>')}`);
      case 'keys history':
        return await call('GET', `/keys/${id('<id>')}/history`);
      case 'keys list':
        return await call(
          'GET',
          `/keys${query({ siteId: site, personId: o.person, gatewayId: o.gateway, status: o.status, limit: o.limit, cursor: o.cursor })}`,
        );
      case 'events':
        return await call(
          'GET',
          `/access-events${query({
            siteId: site,
            gatewayId: o.gateway,
            doorId: o.door?.[0],
            personId: o.person,
            keyId: o.key,
            code: o.code,
            from: time(o.from, 'from'),
            to: time(o.until, 'until'),
            limit: o.limit,
            cursor: o.cursor,
          })}`,
        );
      case 'alarms':
        if (o.open && o.acknowledged) throw new Usage('--open and --acknowledged exclude each other');
        return await call(
          'GET',
          `/alarms${query({
            siteId: site,
            gatewayId: o.gateway,
            lockId: o.lock,
            kind: o.kind,
            state: o.open ? 'open' : o.acknowledged ? 'acknowledged' : undefined,
            from: time(o.from, 'from'),
            to: time(o.until, 'until'),
            limit: o.limit,
            cursor: o.cursor,
          })}`,
        );
      case 'alarms ack':
        return await call('POST', `/alarms/${id('<alarmId>')}/ack`);
      case 'rejected-uplinks':
        return await call(
          'GET',
          `/rejected-uplinks${query({
            gatewayId: o.gateway,
            code: o.code,
            from: time(o.from, 'from'),
            to: time(o.until, 'until'),
            limit: o.limit,
            cursor: o.cursor,
          })}`,
        );
      case 'gateway health':
      case 'gateways health':
        return await call('GET', `/gateways/${id('<id>')}/health`);
      case 'signing list':
        return await call('GET', '/signing-keys');
      case 'signing rotate': {
        // --kid=K for a kid that starts with '-' (base64url thumbprints may), which would read as an option
        const kid = o.kid ?? positionals[3];
        const k = () => encodeURIComponent(need(kid, '<kid>'));
        switch (arg) {
          case 'publish':
            return await call('POST', `/signing-keys/${k()}/publish`);
          case 'switch': {
            const after = count(o['retire-after-seconds'], 'retire-after-seconds');
            return await call('POST', `/signing-keys/${k()}/switch`, after !== undefined ? { retireAfterSeconds: after } : {});
          }
          case 'resign':
            return await call('POST', '/signing-keys/resign');
          case 'retire':
            return await call('POST', `/signing-keys/${k()}/retire`);
          default:
            throw new Usage('signing rotate add | publish <kid> | switch <kid> | resign | retire <kid>');
        }
      }
      case 'dead-letters list':
        return await call('GET', `/dead-letters${query({ siteId: site, gatewayId: o.gateway })}`);
      case 'dead-letters retry':
        return await call('POST', `/dead-letters/${id('<id>')}/retry`);
      case 'tokens create':
        return await call('POST', '/api-tokens', {
          name: need(o.name, '--name'),
          role: need(o.role, '--role'),
          ...(o.site ? { sites: o.site } : {}),
          ...lifetime,
        });
      case 'tokens list':
        return await call('GET', '/api-tokens');
      case 'tokens revoke':
        return await call('POST', `/api-tokens/${id('<id>')}/revoke`);
      case 'tokens rotate':
        return await call('POST', `/api-tokens/${id('<id>')}/rotate`, {
          ...(graceSeconds !== undefined ? { graceSeconds } : {}),
          ...lifetime,
        });
      case 'webhooks create':
        return await call('POST', '/webhooks', {
          siteId: need(site, '--site'),
          url: need(o.url, '--url'),
          events: need(o.event, '--event'),
        });
      case 'webhooks list':
        return await call('GET', `/webhooks${query({ siteId: site })}`);
      case 'webhooks deliveries':
        return await call('GET', `/webhooks/${id('<id>')}/deliveries`);
      case 'webhooks disable':
        return await call('POST', `/webhooks/${id('<id>')}/disable`);
      case 'stays list':
        return await call('GET', `/stays${query({ siteId: site, status: o.status, limit: o.limit, cursor: o.cursor })}`);
      case 'stays get':
        return await call('GET', `/stays/${id('<id>')}`);
      case 'stays payments':
        return await call('GET', `/stays/${id('<id>')}/payments`);
      case 'stays book': {
        const deposit = count(o.deposit, 'deposit');
        // the booking's Idempotency-Key names the stay: --idempotency-key repeats a booking safely
        return await call('POST', '/stays', {
          personId: need(o.person, '--person'),
          roomId: need(o.room, '--room'),
          checkIn: need(o['check-in'], '--check-in'),
          checkOut: need(o['check-out'], '--check-out'),
          amount: need(count(o.amount, 'amount'), '--amount'),
          currency: need(o.currency, '--currency'),
          ...(deposit !== undefined ? { deposit } : {}),
        });
      }
      case 'stays cancel':
        return await call('POST', `/stays/${id('<id>')}/cancel`, { reason: need(o.reason, '--reason') });
      case 'stays check-in':
        return await call('POST', `/stays/${id('<id>')}/check-in`);
      case 'stays check-out':
        return await call('POST', `/stays/${id('<id>')}/check-out`);
      case 'plans create': {
        const intervalCount = count(o['interval-count'], 'interval-count');
        const quota = count(o.quota, 'quota');
        return await call('POST', '/plans', {
          siteId: need(site, '--site'),
          name: need(o.name, '--name'),
          amount: need(count(o.amount, 'amount'), '--amount'),
          currency: need(o.currency, '--currency'),
          interval: need(o.interval, '--interval'),
          doors: need(o.door, '--door'),
          ...(o.id ? { id: o.id } : {}),
          ...(intervalCount !== undefined ? { intervalCount } : {}),
          ...(o['members-only'] ? { membersOnly: true } : {}),
          ...(quota !== undefined ? { monthlyEntryQuota: quota } : {}),
          ...(graceSeconds !== undefined ? { graceSeconds } : {}),
          ...(o['walk-in-amount'] !== undefined ? { walkInAmount: count(o['walk-in-amount'], 'walk-in-amount') } : {}),
        });
      }
      case 'plans list':
        return await call('GET', `/plans${query({ siteId: site, status: o.status, limit: o.limit, cursor: o.cursor })}`);
      case 'plans get':
        return await call('GET', `/plans/${id('<id>')}`);
      case 'plans retire':
        return await call('POST', `/plans/${id('<id>')}/retire`);
      case 'memberships apply': {
        if (o.pin !== undefined && o.card !== undefined) throw new Usage('give at most one of --pin, --card');
        const credential =
          o.pin !== undefined ? { type: 'pin', value: o.pin } : o.card !== undefined ? { type: 'card', value: o.card } : undefined;
        return await call('POST', '/memberships', {
          planId: need(o.plan, '--plan'),
          personId: need(o.person, '--person'),
          ...(o.id ? { id: o.id } : {}),
          ...(credential ? { credential } : {}),
        });
      }
      case 'memberships approve':
        return await call('POST', `/memberships/${id('<id>')}/approve`);
      case 'memberships reject':
      case 'memberships self-cancel':
      case 'memberships force-cancel': {
        const expectedVersion = count(o.version, 'version');
        if (verb === 'force-cancel') need(o.note, '--note');
        return await call('POST', `/memberships/${id('<id>')}/${verb ?? ''}`, {
          ...(o.note !== undefined && verb !== 'self-cancel' ? { note: o.note } : {}),
          ...(expectedVersion !== undefined ? { expectedVersion } : {}),
        });
      }
      case 'memberships list':
        return await call(
          'GET',
          `/memberships${query({ siteId: site, planId: o.plan, personId: o.person, status: o.status, limit: o.limit, cursor: o.cursor })}`,
        );
      case 'memberships get':
        return await call('GET', `/memberships/${id('<id>')}`);
      case 'billing dead-letters': {
        // without --kind: both lists, one answer each (a cursor belongs to one kind)
        let code = 0;
        for (const kind of o.kind ? [o.kind] : ['webhook-events', 'billing-jobs']) {
          code = Math.max(
            code,
            await call('GET', `/billing/dead-letters${query({ kind, siteId: site, limit: o.limit, cursor: o.cursor })}`),
          );
        }
        return code;
      }
      case 'billing retry': {
        const kind = encodeURIComponent(need(arg, '<webhook-events|billing-jobs>'));
        return await call('POST', `/billing/dead-letters/${kind}/${encodeURIComponent(need(positionals[3], '<id>'))}/retry`);
      }
      case 'notifications list':
        return await call(
          'GET',
          `/notifications${query({ siteId: site, status: o.status, template: o.template, personId: o.person, limit: o.limit, cursor: o.cursor })}`,
        );
      case 'notifications show':
        return await call('GET', `/notifications/${id('<id>')}`);
      case 'notifications retry':
        return await call('POST', `/notifications/${id('<id>')}/retry`);
      case 'people contact':
        return await call('PUT', `/people/${id('<id>')}/contact`, {
          ...(o.email !== undefined ? { email: o.email === '' ? null : o.email } : {}),
          ...(o.locale !== undefined ? { locale: o.locale === '' ? null : o.locale } : {}),
        });
      case 'sites locale':
        if (o.locale === undefined) throw new Usage('missing --locale');
        return await call('PUT', `/sites/${id('<id>')}/locale`, { locale: o.locale === '' ? null : o.locale });
      case 'walk-ins create': {
        if ((o.pin === undefined) === (o.card === undefined)) throw new Usage('give exactly one of --pin, --card');
        return await call('POST', '/walk-ins', {
          siteId: need(site, '--site'),
          planId: need(o.plan, '--plan'),
          personId: need(o.person, '--person'),
          credential: o.pin !== undefined ? { type: 'pin', value: o.pin } : { type: 'card', value: o.card },
          ...(o.id ? { id: o.id } : {}),
        });
      }
      case 'walk-ins get':
        return await call('GET', `/walk-ins/${id('<id>')}`);
      case 'walk-ins list':
        return await call(
          'GET',
          `/walk-ins${query({ siteId: site, personId: o.person, status: o.status, limit: o.limit, cursor: o.cursor })}`,
        );
      case 'walk-ins cancel':
        return await call('POST', `/walk-ins/${id('<id>')}/cancel`, { reason: need(o.reason, '--reason') });
      case 'people block':
        return await call('PUT', `/sites/${need(site, '--site')}/blocked-people/${id('<id>')}`, { reason: need(o.reason, '--reason') });
      case 'people unblock':
        return await call('DELETE', `/sites/${need(site, '--site')}/blocked-people/${id('<id>')}`);
      case 'people blocked':
        return await call('GET', `/sites/${need(site, '--site')}/blocked-people`);
      case 'plans quota':
        return await call('GET', `/plans/${id('<id>')}/quota${query({ personId: o.person, month: o.month })}`);
      default:
        throw new Usage(`unknown command: ${positionals.join(' ')}`);
    }
  } catch (e) {
    if (e instanceof Usage) {
      io.err(`${e.message}\n${HELP}`);
      return 2;
    }
    io.err(`error: ${e instanceof Error ? e.message : String(e)}`);
    return 1;
  }

  async function rotateSecrets(cli: CliIo, opts: { batch: number; limit: number | undefined }): Promise<number> {
    if (opts.batch < 1) throw new Usage('--batch: at least 1');
    const config = parseConfig(cli.env);
    const box = loadSecretBox(config);
    // one run, one cid: its log lines (rows that did not open) are found together
    const log = withCorrelation(createLogger('admin-cli'), o.cid ?? newCorrelationId(), { command: 'secrets rotate' });
    const run = async (db: Queryable): Promise<number> => {
      const r = await resealSecrets(db, box, {
        batch: opts.batch,
        ...(opts.limit !== undefined ? { limit: opts.limit } : {}),
        onProgress: (p) => cli.err(JSON.stringify({ column: p.column, rotated: p.rotated, of: p.total, unreadable: p.unreadable.length })),
      });
      for (const u of r.unreadable) log.error({ code: u.code, id: u.id, kid: u.kid }, 'secret not re-encrypted: it does not open');
      cli.out(JSON.stringify({ kid: r.kid, rotated: r.rotated, unreadable: r.unreadable, remaining: r.remaining }, null, 2));
      if (r.remaining === 0) cli.err(`every secret is under ${r.kid}: the older KEKs may now be removed from TOBIRA_KEKS`);
      return r.remaining === 0 ? 0 : 1;
    };
    if (cli.db) return await run(cli.db);
    const db = await openDb(config, log);
    try {
      await migrate(db, log, Date.now());
      return await run(db);
    } finally {
      await db.close();
    }
  }

  async function bootstrap(cli: CliIo, name: string): Promise<number> {
    if (cli.db) {
      const t = await createApiToken(cli.db, { name, role: 'admin', ...lifetime });
      cli.out(JSON.stringify({ id: t.id, role: t.role, token: t.token, expiresAt: t.expiresAt }, null, 2));
      return 0;
    }
    const config = parseConfig(cli.env);
    const log = createLogger('admin-cli');
    const db = await openDb(config, log);
    try {
      await migrate(db, log, Date.now());
      const t = await createApiToken(db, { name, role: 'admin', ...lifetime });
      cli.out(JSON.stringify({ id: t.id, role: t.role, token: t.token, expiresAt: t.expiresAt }, null, 2));
      cli.err('store this token now: it is shown once and only its hash is kept');
      return 0;
    } finally {
      await db.close();
    }
  }
}

const invokedDirectly = (() => {
  try {
    return process.argv[1] !== undefined && realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
})();
if (invokedDirectly) {
  const code = await runAdminCli(process.argv.slice(2), {
    env: process.env,
    out: (s) => void process.stdout.write(`${s}\n`),
    err: (s) => void process.stderr.write(`${s}\n`),
  });
  process.exitCode = code;
}
