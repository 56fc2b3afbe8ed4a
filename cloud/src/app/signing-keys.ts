import { newCorrelationId, newId, refused, withCorrelation, type CorrelationId, type Outcome } from '@tobira/shared';
import {
  allGatewayIds,
  deliveryCounts,
  gatewaysNotAcked,
  listSigningKeys as listRows,
  liveKeys,
  lockAllSigningKeys,
  lockSigningKey,
  recordDelivery,
  saveSigningKey,
  type SigningKeyRow,
} from '../adapters/db/signing-keys.js';
import type { Queryable } from '../adapters/db/db.js';
import { grantNames } from '../adapters/db/keys.js';
import { enqueue } from '../adapters/outbox/enqueue.js';
import type { CloudSigner } from '../adapters/signer.js';
import * as domain from '../domain/signing-keys.js';
import { toGrant } from '../domain/keys.js';
import type { AppDeps } from './deps.js';

/**
 * Signing-key rotation (docs/operations.md): publish → switch →
 * re-sign → retire, each one transaction that writes the key's new place and
 * the outbox rows it needs, so the gateways learn of it in seq order with the
 * grants around it. The private keys are CLOUD_SIGNING_JWK's (the "add" step
 * is putting a new one there and restarting); the table only says which signs.
 */
export interface SigningDeps extends AppDeps {
  readonly signer: CloudSigner;
}

/** A key as the admin API shows it, with its keyset.update deliveries (`queued` / `applied` / `refused` gateways per step). */
export interface SigningKeyView {
  readonly kid: string;
  readonly status: domain.SigningKeyStatus;
  readonly notBefore: number | null;
  readonly retireAfter: number | null;
  readonly resignedAt: number | null;
  readonly loaded: boolean;
  readonly deliveries: {
    readonly step: 'publish' | 'retire';
    readonly queued: number;
    readonly applied: number;
    readonly refused: number;
  }[];
}

/** What a step changed: the key, and how many outbox rows it queued. */
export interface SigningStep {
  readonly key: SigningKeyView;
  readonly queued: number;
}
export type SigningResult = Outcome<SigningStep> & { readonly cid: CorrelationId };

export async function listSigningKeys(deps: SigningDeps): Promise<SigningKeyView[]> {
  const [rows, counts] = await Promise.all([listRows(deps.db), deliveryCounts(deps.db)]);
  return rows.map((r) => viewOf(deps, r, counts));
}

function viewOf(deps: SigningDeps, r: SigningKeyRow, counts: Awaited<ReturnType<typeof deliveryCounts>>): SigningKeyView {
  return {
    kid: r.kid,
    status: r.status,
    notBefore: r.notBefore,
    retireAfter: r.retireAfter,
    resignedAt: r.resignedAt,
    loaded: deps.signer.loaded.has(r.kid),
    deliveries: counts.filter((c) => c.kid === r.kid).map(({ kid: _k, ...c }) => c),
  };
}

async function stepView(deps: SigningDeps, q: Queryable, kid: string, queued: number): Promise<SigningStep> {
  const [rows, counts] = await Promise.all([listRows(q), deliveryCounts(q)]);
  const r = rows.find((x) => x.kid === kid);
  if (r === undefined) throw new Error(`signing key ${kid} vanished inside its own transaction`);
  return { key: viewOf(deps, r, counts), queued };
}

/** Runs a step in its transaction, then wakes the dispatcher and re-reads the signer (this process signs with the new key at once). */
async function run(
  deps: SigningDeps,
  what: string,
  cid: CorrelationId,
  body: (tx: Queryable, now: number) => Promise<Outcome<SigningStep>>,
): Promise<SigningResult> {
  const log = withCorrelation(deps.log, cid, { verb: what });
  const o = await deps.db.transaction((tx) => body(tx, deps.clock.now()));
  log.info(
    { status: o.status, code: o.code, ...(o.status === 'applied' ? { kid: o.state.key.kid, queued: o.state.queued } : {}) },
    'signing key step done',
  );
  if (o.status === 'applied') {
    if (o.state.queued > 0) deps.wake();
    await deps.signer.refresh(deps.db);
  }
  return { ...o, cid };
}

async function queueKeysetUpdate(
  tx: Queryable,
  gatewayId: string,
  step: 'publish' | 'retire',
  key: SigningKeyRow,
  cid: CorrelationId,
  now: number,
): Promise<void> {
  const body =
    step === 'publish'
      ? { updateId: newId(), add: [{ jwk: { ...key.publicJwk, alg: 'EdDSA', use: 'sig' }, notBefore: key.notBefore ?? now }], retire: [] }
      : { updateId: newId(), add: [], retire: [{ kid: key.kid, at: key.retireAfter ?? now }] };
  const e = await enqueue(tx, { gatewayId, type: 'keyset.update', keyId: null, keyVersion: null, body, cid }, now);
  await recordDelivery(tx, { kid: key.kid, step, gatewayId, jti: e.jti, seq: e.seq }, now);
}

/** Step 2 (after adding the key to CLOUD_SIGNING_JWK): publish it in the JWKS and queue a keyset.update adding it for every gateway that has not applied it. */
export function publishSigningKey(deps: SigningDeps, input: { kid: string; cid?: CorrelationId }): Promise<SigningResult> {
  const cid = input.cid ?? newCorrelationId();
  return run(deps, 'publishSigningKey', cid, async (tx, now) => {
    const k = await lockSigningKey(tx, input.kid);
    const pending = k === null ? [] : await gatewaysNotAcked(tx, input.kid, 'publish');
    const o = domain.publish(k, pending.length, now);
    if (o.status !== 'applied' || k === null)
      return o.status === 'noop' ? { ...o, state: await stepView(deps, tx, input.kid, 0) } : refusedOf(o);
    if (o.state.status !== k.status && (await saveSigningKey(tx, o.state, k.status)) !== 1)
      throw new Error('signing key changed under its lock');
    for (const g of pending) await queueKeysetUpdate(tx, g, 'publish', o.state, cid, now);
    return { ...o, state: await stepView(deps, tx, input.kid, pending.length) };
  });
}

/**
 * Step 3: sign with this key from now on. Refused SIGNING_KEY_NOT_DELIVERED
 * while a gateway has not applied its publish, SIGNING_KEY_NOT_LOADED when
 * this process lacks its private part. The old signer becomes `previous`.
 */
export function switchSigningKey(
  deps: SigningDeps,
  input: { kid: string; retireAfterSeconds?: number; cid?: CorrelationId },
): Promise<SigningResult> {
  return run(deps, 'switchSigningKey', input.cid ?? newCorrelationId(), async (tx, now) => {
    const all = await lockAllSigningKeys(tx);
    const k = all.find((x) => x.kid === input.kid) ?? null;
    const notAcked = k === null ? [] : await gatewaysNotAcked(tx, input.kid, 'publish');
    const retireAfter = now + (input.retireAfterSeconds ?? 86_400) * 1000;
    const o = domain.switchTo(k, { loaded: deps.signer.loaded.has(input.kid), notAcked, retireAfter }, now);
    if (o.status !== 'applied' || k === null)
      return o.status === 'noop' ? { ...o, state: await stepView(deps, tx, input.kid, 0) } : refusedOf(o);
    const old = all.find((x) => x.status === 'signing');
    // the old signer first: the unique index allows one signer at a time
    if (old !== undefined && (await saveSigningKey(tx, domain.switchAway(old, retireAfter, now), 'signing')) !== 1)
      throw new Error('signer changed under its lock');
    if ((await saveSigningKey(tx, o.state, k.status)) !== 1) throw new Error('signing key changed under its lock');
    return { ...o, state: await stepView(deps, tx, input.kid, 0) };
  });
}

/**
 * Step 4: queue every live grant (issuing or active keys) again, to be signed
 * by the current signer when dispatched; marks every `previous` key re-signed.
 * The gateway keeps the key (same version: KEY_ALREADY_ACTIVE) and notes the
 * new signer, so nothing rests on the old key once it is retired.
 */
export function resignLiveGrants(deps: SigningDeps, input: { cid?: CorrelationId } = {}): Promise<SigningResult> {
  const cid = input.cid ?? newCorrelationId();
  return run(deps, 'resignLiveGrants', cid, async (tx, now) => {
    const all = await lockAllSigningKeys(tx);
    const signer = all.find((x) => x.status === 'signing');
    if (signer === undefined) return refused('SIGNING_KEY_NOT_FOUND', 'no signing key');
    for (const p of all.filter((x) => x.status === 'previous')) {
      if ((await saveSigningKey(tx, { ...p, resignedAt: now, updatedAt: now }, 'previous')) !== 1)
        throw new Error('signing key changed under its lock');
    }
    const keys = await liveKeys(tx);
    const names = await grantNames(tx, keys);
    for (const key of keys) {
      await enqueue(
        tx,
        { gatewayId: key.gatewayId, type: 'key.grant', keyId: key.id, keyVersion: key.version, body: { key: toGrant(key, names) }, cid },
        now,
      );
    }
    return { status: 'applied', code: 'SIGNING_KEY_RESIGN_QUEUED', state: await stepView(deps, tx, signer.kid, keys.length), emits: [] };
  });
}

/** Step 5: retire a previous signer: a keyset.update retiring it is queued for every gateway (after the re-sent grants, in seq order). */
export function retireSigningKey(deps: SigningDeps, input: { kid: string; cid?: CorrelationId }): Promise<SigningResult> {
  const cid = input.cid ?? newCorrelationId();
  return run(deps, 'retireSigningKey', cid, async (tx, now) => {
    const k = await lockSigningKey(tx, input.kid);
    const o = domain.retire(k, now);
    if (o.status !== 'applied' || k === null)
      return o.status === 'noop' ? { ...o, state: await stepView(deps, tx, input.kid, 0) } : refusedOf(o);
    if ((await saveSigningKey(tx, o.state, k.status)) !== 1) throw new Error('signing key changed under its lock');
    const gateways = await allGatewayIds(tx);
    for (const g of gateways) await queueKeysetUpdate(tx, g, 'retire', o.state, cid, now);
    return { ...o, state: await stepView(deps, tx, input.kid, gateways.length) };
  });
}

function refusedOf(o: Outcome<unknown>): Outcome<SigningStep> {
  if (o.status === 'refused') return o;
  throw new Error(`unexpected ${o.status} ${o.code}`);
}
