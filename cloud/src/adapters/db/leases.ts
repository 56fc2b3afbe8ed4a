import type { Queryable } from './db.js';

/**
 * Take a named round lease (table `cloud_leases`, migration 0021) for
 * `forMs` from the database's now: true when this holder got it — the row was missing, or
 * its lease had run out — false when another holder's lease (or this
 * holder's own, from its previous round) still runs. One statement, so two
 * replicas asking at once cannot both get it (the row's lock orders them and
 * the loser's `WHERE` sees the winner's `until`). Guarantee: at most one
 * holder per `forMs` window; a holder that dies loses nothing but its round.
 */
export async function takeRoundLease(q: Queryable, name: string, holder: string, forMs: number): Promise<boolean> {
  // the database's clock, not the replica's: one time reference for every replica (and tests' manual clocks stay out of it)
  const r = await q.query<{ holder: string }>(
    `WITH t AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now)
     INSERT INTO cloud_leases (name, holder, until) SELECT $1, $2, t.now + $3::bigint FROM t
     ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, until = EXCLUDED.until
      WHERE cloud_leases.until <= (extract(epoch FROM clock_timestamp()) * 1000)::bigint
     RETURNING holder`,
    [name, holder, forMs],
  );
  return r.rowCount === 1;
}
