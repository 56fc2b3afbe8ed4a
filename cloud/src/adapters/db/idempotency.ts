import { randomUUID } from 'node:crypto';
import { parseRow } from '@tobira/shared';
import { z } from 'zod';
import type { Queryable } from './db.js';

/** How long a first request holds its Idempotency-Key before a retry may take it over (a crashed holder). */
export const IDEMPOTENCY_LOCK_MS = 60_000;

const KeyRow = z.object({
  request_hash: z.string(),
  state: z.string(),
  locked_until: z.number(),
  status_code: z.number().nullable(),
  response: z.unknown(),
  claim_token: z.string().nullable(),
});

export type Claim =
  /** `token` fences this holder: complete and release name it (a takeover writes a new one). */
  | { readonly kind: 'run'; readonly token: string }
  | { readonly kind: 'replay'; readonly statusCode: number; readonly body: unknown }
  | { readonly kind: 'reused' }
  | { readonly kind: 'in_progress' };

/**
 * Claims (token, key) for this request, committed on its own as a lock row.
 * `run`: the caller runs the request and calls `complete` in the effect's own
 * transaction (or `release` when it failed). A finished key replays
 * its stored response; a different request under the same key is refused; a
 * live holder makes the duplicate wait (retryable 409); a holder whose lock
 * ran out (crashed, or only slow) is taken over by compare-and-set on its
 * claim token, which the takeover replaces: the old holder, if it is still
 * running, can then neither complete nor release the key (fencing, as the
 * outbox dispatcher's lease token).
 */
export async function claim(db: Queryable, tokenId: string, key: string, hash: string, now: number): Promise<Claim> {
  const token = randomUUID();
  const ins = await db.query(
    `INSERT INTO idempotency_keys (token_id, key, request_hash, state, locked_until, created_at, claim_token) VALUES ($1,$2,$3,'in_progress',$4,$5,$6)
      ON CONFLICT (token_id, key) DO NOTHING`,
    [tokenId, key, hash, now + IDEMPOTENCY_LOCK_MS, now, token],
  );
  if (ins.rowCount === 1) return { kind: 'run', token };
  const r = await db.query(
    'SELECT request_hash, state, locked_until, status_code, response, claim_token FROM idempotency_keys WHERE token_id = $1 AND key = $2',
    [tokenId, key],
  );
  const row = r.rows[0] === undefined ? undefined : parseRow('idempotency_keys', KeyRow, r.rows[0]);
  if (!row) return claim(db, tokenId, key, hash, now); // released between the insert and the select
  if (row.request_hash !== hash) return { kind: 'reused' };
  if (row.state === 'done' && row.status_code !== null) return { kind: 'replay', statusCode: row.status_code, body: row.response };
  if (row.locked_until > now) return { kind: 'in_progress' };
  const took = await db.query(
    `UPDATE idempotency_keys SET locked_until = $4, claim_token = $5
      WHERE token_id = $1 AND key = $2 AND state = 'in_progress' AND locked_until = $3 AND claim_token IS NOT DISTINCT FROM $6`,
    [tokenId, key, row.locked_until, now + IDEMPOTENCY_LOCK_MS, token, row.claim_token],
  );
  return took.rowCount === 1 ? { kind: 'run', token } : { kind: 'in_progress' };
}

/**
 * Called first in the transaction of the effect: true when `claimToken`
 * still holds the key, and then the row stays locked until that transaction
 * ends, so a retry that finds the lock run out waits for this holder instead
 * of taking over under it (on PostgreSQL; PGlite runs one transaction at a
 * time anyway). False: the claim was taken over before the effect began, and
 * the caller must not run it (an external leg such as a broker call would
 * otherwise happen for a request that can no longer commit).
 */
export async function hold(db: Queryable, tokenId: string, key: string, claimToken: string): Promise<boolean> {
  const r = await db.query(
    `SELECT 1 FROM idempotency_keys WHERE token_id = $1 AND key = $2 AND state = 'in_progress' AND claim_token = $3 FOR UPDATE`,
    [tokenId, key, claimToken],
  );
  return r.rows.length === 1;
}

/**
 * Stores the response if `claimToken` still holds the key; called inside the
 * transaction of the effect, so both commit or neither does. False (0 rows):
 * the claim was taken over (or the key already completed), and the caller
 * must roll the effect back. After `hold` this cannot happen on PostgreSQL
 * (a takeover waits for the holder's row lock, then finds the key done); it
 * stays as the last guard, so at most one holder ever completes.
 */
export async function complete(
  db: Queryable,
  tokenId: string,
  key: string,
  claimToken: string,
  statusCode: number,
  body: unknown,
): Promise<boolean> {
  const r = await db.query(
    `UPDATE idempotency_keys SET state = 'done', status_code = $3, response = $4::jsonb
      WHERE token_id = $1 AND key = $2 AND state = 'in_progress' AND claim_token = $5`,
    [tokenId, key, statusCode, JSON.stringify(body), claimToken],
  );
  return r.rowCount === 1;
}

/** A request that failed with a 5xx leaves no trace: the client may retry it under the same key. A holder that lost its claim deletes nothing. */
export async function release(db: Queryable, tokenId: string, key: string, claimToken: string): Promise<void> {
  await db.query(`DELETE FROM idempotency_keys WHERE token_id = $1 AND key = $2 AND state = 'in_progress' AND claim_token = $3`, [
    tokenId,
    key,
    claimToken,
  ]);
}
