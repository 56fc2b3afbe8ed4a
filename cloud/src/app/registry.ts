import { randomBytes } from 'node:crypto';
import {
  KeySet,
  applied,
  newCorrelationId,
  newId,
  refused,
  topics,
  withCorrelation,
  type CorrelationId,
  type Jwks,
  type Outcome,
} from '@tobira/shared';

type JWK = Jwks['keys'][number];
import { pgErrorCode } from '../adapters/db/db.js';
import { getGateway, insertGateway } from '../adapters/db/gateways.js';
import type { SiteScope } from '../adapters/db/scope.js';
import { getSite, insertDoor, insertPerson, insertSite, recordPersonSite } from '../adapters/db/registry.js';
import { BrokerUnavailable, type BrokerCredentials } from './broker-accounts.js';
import type { AppDeps } from './deps.js';
import { CreateDoorInput, CreatePersonInput, CreateSiteInput, RegisterGatewayInput, check } from './inputs.js';

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
  // a taken id is ALREADY_EXISTS, judged by rows affected
  if (!(await insertSite(deps.db, { ...site, createdAt: deps.clock.now() }))) return refused('ALREADY_EXISTS', `site ${site.id}`);
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
  input: { gatewayId: string; siteId: string; publicJwk: JWK; cid?: CorrelationId; siteScope?: SiteScope },
): Promise<Outcome<GatewayProvisioning>> {
  const invalid = check(RegisterGatewayInput, input);
  if (invalid) return invalid;
  // the caller's scope first: a site it cannot see is not found, whatever else is wrong with the request
  const site = await getSite(deps.db, input.siteScope ?? null, input.siteId);
  if (site === null) return refused('SITE_NOT_FOUND');
  try {
    const { d: _private, ...pub } = input.publicJwk;
    if (_private !== undefined) return refused('INVALID_PUBLIC_KEY', 'a private key was sent');
    await KeySet.fromJwks({ keys: [pub] });
  } catch (e) {
    return refused('INVALID_PUBLIC_KEY', e instanceof Error ? e.message : 'bad key');
  }
  const log = withCorrelation(deps.log, input.cid ?? newCorrelationId(), { verb: 'registerGateway', gatewayId: input.gatewayId });
  const pepper = randomBytes(32).toString('base64url');
  let mqtt: BrokerCredentials | null;
  try {
    mqtt = await deps.db.transaction(async (tx) => {
      await insertGateway(tx, deps.secrets, {
        id: input.gatewayId,
        siteId: input.siteId,
        publicJwk: input.publicJwk,
        pepper,
        createdAt: deps.clock.now(),
      });
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
    offlineGraceSeconds: site.offlineGraceSeconds,
    timeZone: site.timeZone,
    topics: {
      down: topics.gatewayDown(input.gatewayId),
      up: topics.gatewayUp(input.gatewayId),
      presence: topics.gatewayPresence(input.gatewayId),
    },
    mqtt,
  });
}

export interface Door {
  readonly id: string;
  readonly siteId: string;
  readonly gatewayId: string;
  readonly name: string;
}

/** `siteScope`: the caller's sites; a gateway outside them is not found. Absent or null: every site. */
export async function createDoor(
  deps: AppDeps,
  input: { id?: string; gatewayId: string; name: string; siteScope?: SiteScope },
): Promise<Outcome<Door>> {
  const invalid = check(CreateDoorInput, input);
  if (invalid) return invalid;
  const gateway = await getGateway(deps.db, input.siteScope ?? null, input.gatewayId);
  if (gateway === null) return refused('GATEWAY_NOT_FOUND');
  const siteId = gateway.siteId;
  const door: Door = { id: input.id ?? newId(), siteId, gatewayId: input.gatewayId, name: input.name };
  if (!(await insertDoor(deps.db, { ...door, createdAt: deps.clock.now() }))) return refused('ALREADY_EXISTS', `door ${door.id}`);
  return applied('MESSAGE_APPLIED', door);
}

export interface Person {
  readonly id: string;
  readonly name: string;
}

/**
 * A person (key holder). People are global in the core; `siteId` records the
 * site the person was created for (the admin API scopes people by it), and
 * `siteScope` is the caller's sites: a site outside them is not found.
 */
export async function createPerson(
  deps: AppDeps,
  input: { id?: string; name: string; siteId?: string; siteScope?: SiteScope },
): Promise<Outcome<Person>> {
  const invalid = check(CreatePersonInput, input);
  if (invalid) return invalid;
  const { siteId } = input;
  if (siteId !== undefined && (await getSite(deps.db, input.siteScope ?? null, siteId)) === null) return refused('SITE_NOT_FOUND');
  const person: Person = { id: input.id ?? newId(), name: input.name };
  const created = await deps.db.transaction(async (tx) => {
    if (!(await insertPerson(tx, { ...person, createdAt: deps.clock.now() }))) return false;
    if (siteId !== undefined) await recordPersonSite(tx, person.id, siteId);
    return true;
  });
  if (!created) return refused('ALREADY_EXISTS', `person ${person.id}`);
  return applied('MESSAGE_APPLIED', person);
}
