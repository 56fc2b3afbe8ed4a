import { randomBytes } from 'node:crypto';
import { KeySet, applied, newCorrelationId, newId, refused, topics, withCorrelation, type CorrelationId, type Jwks, type Outcome } from '@tobira/shared';

type JWK = Jwks['keys'][number];
import { pgErrorCode } from '../adapters/db/db.js';
import { BrokerUnavailable, type BrokerCredentials } from './broker-accounts.js';
import type { AppDeps } from './deps.js';
import { CreateDoorInput, CreatePersonInput, CreateSiteInput, RegisterGatewayInput, check } from './inputs.js';
import type { Queryable } from '../adapters/db/db.js';

/** Inserts a setup row; a taken id is ALREADY_EXISTS, judged by rows affected. */
async function insertNew(q: Queryable, sql: string, params: unknown[]): Promise<boolean> {
  return (await q.query(`${sql} ON CONFLICT (id) DO NOTHING`, params)).rowCount === 1;
}

/**
 * Sites, gateways, doors and people: setup data, plain inserts that answer
 * with an Outcome. Ids may be given by the caller or are generated.
 */
export interface Site {
  readonly id: string;
  readonly name: string;
  readonly timeZone: string;
  readonly offlineGraceSeconds: number;
}

export async function createSite(
  deps: AppDeps,
  input: { id?: string; name: string; timeZone?: string; offlineGraceSeconds?: number },
): Promise<Outcome<Site>> {
  const invalid = check(CreateSiteInput, input);
  if (invalid) return invalid;
  const site: Site = {
    id: input.id ?? newId(),
    name: input.name,
    timeZone: input.timeZone ?? 'Asia/Tokyo',
    offlineGraceSeconds: input.offlineGraceSeconds ?? 300,
  };
  const ok = await insertNew(deps.db, 'INSERT INTO sites (id, name, time_zone, offline_grace_seconds, created_at) VALUES ($1,$2,$3,$4,$5)', [
    site.id,
    site.name,
    site.timeZone,
    site.offlineGraceSeconds,
    deps.clock.now(),
  ]);
  if (!ok) return refused('ALREADY_EXISTS', `site ${site.id}`);
  return applied('MESSAGE_APPLIED', site);
}

/** What a gateway receives at provisioning. */
export interface GatewayProvisioning {
  readonly gatewayId: string;
  readonly siteId: string;
  /** base64url, 32 bytes: key of the credential digests (shared/src/credential.ts). */
  readonly credentialPepper: string;
  readonly cloudIssuer: string;
  readonly cloudJwks: Jwks;
  readonly offlineGraceSeconds: number;
  /** The site's IANA time zone: the gateway's staff UI shows times in it. */
  readonly timeZone: string;
  readonly topics: { readonly down: string; readonly up: string; readonly presence: string };
  /** The gateway's own login on the cloud broker; null when the cloud does not manage broker accounts. */
  readonly mqtt: BrokerCredentials | null;
}

export async function registerGateway(
  deps: AppDeps,
  cloud: { issuer: string; jwks: Jwks },
  input: { gatewayId: string; siteId: string; publicJwk: JWK; cid?: CorrelationId },
): Promise<Outcome<GatewayProvisioning>> {
  const invalid = check(RegisterGatewayInput, input);
  if (invalid) return invalid;
  try {
    const { d: _private, ...pub } = input.publicJwk;
    if (_private !== undefined) return refused('INVALID_PUBLIC_KEY', 'a private key was sent');
    await KeySet.fromJwks({ keys: [pub] });
  } catch (e) {
    return refused('INVALID_PUBLIC_KEY', e instanceof Error ? e.message : 'bad key');
  }
  const site = (await deps.db.query<{ offline_grace_seconds: number; time_zone: string }>('SELECT offline_grace_seconds, time_zone FROM sites WHERE id = $1', [input.siteId])).rows[0];
  if (site === undefined) return refused('SITE_NOT_FOUND');
  const log = withCorrelation(deps.log, input.cid ?? newCorrelationId(), { verb: 'registerGateway', gatewayId: input.gatewayId });
  const pepper = randomBytes(32).toString('base64url');
  let mqtt: BrokerCredentials | null;
  try {
    mqtt = await deps.db.transaction(async (tx) => {
      await tx.query('INSERT INTO gateways (id, site_id, public_jwk, credential_pepper, created_at) VALUES ($1,$2,$3::jsonb,$4,$5)', [
        input.gatewayId,
        input.siteId,
        JSON.stringify(input.publicJwk),
        pepper,
        deps.clock.now(),
      ]);
      await tx.query('INSERT INTO gateway_seq (gateway_id, last_seq) VALUES ($1, 0)', [input.gatewayId]);
      // last: the rows are in, so an existing gateway never gets its broker password replaced here
      return deps.brokerAccounts.provisionGateway(tx, input.gatewayId, log);
    });
  } catch (e) {
    if (pgErrorCode(e) === '23505') return refused('GATEWAY_ALREADY_EXISTS');
    if (e instanceof BrokerUnavailable) {
      log.warn({ err: e.message }, 'broker account not created; registration rolled back');
      return refused('BROKER_UNAVAILABLE', e.message);
    }
    throw e;
  }
  log.info({ siteId: input.siteId, brokerAccount: mqtt?.username ?? null }, 'gateway registered');
  return applied('MESSAGE_APPLIED', {
    gatewayId: input.gatewayId,
    siteId: input.siteId,
    credentialPepper: pepper,
    cloudIssuer: cloud.issuer,
    cloudJwks: cloud.jwks,
    offlineGraceSeconds: site.offline_grace_seconds,
    timeZone: site.time_zone,
    topics: { down: topics.gatewayDown(input.gatewayId), up: topics.gatewayUp(input.gatewayId), presence: topics.gatewayPresence(input.gatewayId) },
    mqtt,
  });
}

export interface Door {
  readonly id: string;
  readonly siteId: string;
  readonly gatewayId: string;
  readonly name: string;
}

export async function createDoor(deps: AppDeps, input: { id?: string; gatewayId: string; name: string }): Promise<Outcome<Door>> {
  const invalid = check(CreateDoorInput, input);
  if (invalid) return invalid;
  const gw = await deps.db.query<{ site_id: string }>('SELECT site_id FROM gateways WHERE id = $1', [input.gatewayId]);
  const siteId = gw.rows[0]?.site_id;
  if (siteId === undefined) return refused('GATEWAY_NOT_FOUND');
  const door: Door = { id: input.id ?? newId(), siteId, gatewayId: input.gatewayId, name: input.name };
  const ok = await insertNew(deps.db, 'INSERT INTO doors (id, site_id, gateway_id, name, created_at) VALUES ($1,$2,$3,$4,$5)', [
    door.id,
    door.siteId,
    door.gatewayId,
    door.name,
    deps.clock.now(),
  ]);
  if (!ok) return refused('ALREADY_EXISTS', `door ${door.id}`);
  return applied('MESSAGE_APPLIED', door);
}

export interface Person {
  readonly id: string;
  readonly name: string;
}

export async function createPerson(deps: AppDeps, input: { id?: string; name: string }): Promise<Outcome<Person>> {
  const invalid = check(CreatePersonInput, input);
  if (invalid) return invalid;
  const person: Person = { id: input.id ?? newId(), name: input.name };
  const ok = await insertNew(deps.db, 'INSERT INTO people (id, name, created_at) VALUES ($1,$2,$3)', [person.id, person.name, deps.clock.now()]);
  if (!ok) return refused('ALREADY_EXISTS', `person ${person.id}`);
  return applied('MESSAGE_APPLIED', person);
}
