import type { Queryable } from './db.js';
import { scopeParam, type SiteScope } from './scope.js';

/**
 * Which site holds a row, for the HTTP layer's trust boundary (no answer reveals another site's row):
 * a create that names an id held by another site, and a verb that references
 * a row of another site, must answer as if that row did not exist. The verbs
 * take their own scope where they read; these reads let a route check every
 * row a request names before any verb runs, whatever the verb reads itself.
 */
export type RowKind = 'key' | 'room' | 'plan' | 'membership' | 'walkIn' | 'door' | 'gateway' | 'person' | 'stay' | 'site';

// each query answers the site ids of the row (none: no such row; people may have several)
const SITES_OF: Record<RowKind, string> = {
  key: 'SELECT g.site_id FROM keys k JOIN gateways g ON g.id = k.gateway_id WHERE k.id = $1',
  room: 'SELECT site_id FROM rooms WHERE id = $1',
  plan: 'SELECT site_id FROM plans WHERE id = $1',
  membership: 'SELECT site_id FROM memberships WHERE id = $1',
  walkIn: 'SELECT site_id FROM walk_ins WHERE id = $1',
  door: 'SELECT site_id FROM doors WHERE id = $1',
  gateway: 'SELECT site_id FROM gateways WHERE id = $1',
  stay: 'SELECT site_id FROM stays WHERE id = $1',
  site: 'SELECT id AS site_id FROM sites WHERE id = $1',
  // a person belongs to the sites it was created for and those where it holds a key (registry.ts PERSON_VISIBLE)
  person: `SELECT ps.site_id FROM people p JOIN api_person_sites ps ON ps.person_id = p.id WHERE p.id = $1
           UNION SELECT g.site_id FROM keys k JOIN gateways g ON g.id = k.gateway_id WHERE k.person_id = $1
           UNION SELECT NULL FROM people p WHERE p.id = $1`,
};

/**
 * Where a row stands for a scope: `visible` (it exists at one of the scope's
 * sites, or the scope is every site), `foreign` (it exists, at none of them),
 * `absent`.
 */
export async function rowStanding(q: Queryable, scope: SiteScope, kind: RowKind, id: string): Promise<'visible' | 'foreign' | 'absent'> {
  const reach = await rowReach(q, scope, kind, id);
  return reach === 'shared' ? 'visible' : reach;
}

/**
 * As `rowStanding`, and `shared` for a visible row that also belongs to a
 * site outside the scope (a person created for one site, holding a key at
 * another): the caller sees it, but may not change what the other site
 * relies on too (its contact, its name).
 */
export async function rowReach(
  q: Queryable,
  scope: SiteScope,
  kind: RowKind,
  id: string,
): Promise<'visible' | 'shared' | 'foreign' | 'absent'> {
  return reachOf(await q.query<{ site_id: string | null }>(SITES_OF[kind], [id]), scope);
}

/**
 * Every site that relies on a person's contact: those it belongs to (as `rowReach`), and those holding a
 * stay, membership, walk-in or block of theirs. A site can book a person it could see through another
 * site's token (an admin of both), before any key exists there; its notices (the stay's PIN among them)
 * go to her contact, so another site may not re-point it then either.
 */
const SITES_RELYING_ON_PERSON = `${SITES_OF.person}
           UNION SELECT site_id FROM stays WHERE person_id = $1
           UNION SELECT site_id FROM memberships WHERE person_id = $1
           UNION SELECT site_id FROM walk_ins WHERE person_id = $1
           UNION SELECT site_id FROM blocked_people WHERE person_id = $1`;

/** As `rowReach` for a person, `shared` also when a site outside the scope holds a stay, membership, walk-in or block of theirs. */
export async function personContactReach(
  q: Queryable,
  scope: SiteScope,
  personId: string,
): Promise<'visible' | 'shared' | 'foreign' | 'absent'> {
  const visible = await rowReach(q, scope, 'person', personId);
  if (visible !== 'visible') return visible;
  return reachOf(await q.query<{ site_id: string | null }>(SITES_RELYING_ON_PERSON, [personId]), scope);
}

function reachOf(r: { rows: readonly { site_id: string | null }[] }, scope: SiteScope): 'visible' | 'shared' | 'foreign' | 'absent' {
  if (r.rows.length === 0) return 'absent';
  const sites = scopeParam(scope);
  if (sites === null) return 'visible';
  const held = r.rows.flatMap((x) => (x.site_id === null ? [] : [x.site_id]));
  if (!held.some((s) => sites.includes(s))) return 'foreign';
  return held.every((s) => sites.includes(s)) ? 'visible' : 'shared';
}
