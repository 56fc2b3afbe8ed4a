/**
 * The cloud admin API's authorization matrix: what every route answers to
 * every principal, for a resource of the caller's own site and for one of
 * another site. `authz-matrix.test.ts` runs every row of it over real HTTP
 * and fails for a route that has no row here (or a row for a route that is
 * gone), so a new route cannot be added unchecked.
 *
 * How to read a row:
 * - `access`: who may call the route at all (PRINCIPAL RULES below say what
 *   everyone else gets, before any row is looked at).
 * - `params` / `query` / `body`: what the request names, built from the
 *   fixtures of the site it targets (`t`, site A in every check) and of the
 *   caller's own site (`me`, site B when B attacks).
 * - `foreign`: the answer a caller of site B gets for site A's resource
 *   (a manager, an auditor where it may read, an admin limited to site B).
 *   Beyond the status and code, every such answer is searched for every id
 *   and name of site A's fixtures that the request itself did not send:
 *   none may appear (no answer reveals another site's row).
 * - `own`: the statuses a caller of site A (an admin of every site and site
 *   A's manager; site A's auditor for reads) may get for the same request:
 *   never 401/403 and never the resource's not-found.
 * - `taken`: for a create that takes a caller-chosen id, a body of site B's
 *   own rows under the id of site A's row: 409 ID_UNAVAILABLE with nothing
 *   of that row.
 * - `shared`: for a route naming a person, what site B's manager and site
 *   B's admin get for the request built from site B's own fixtures but
 *   naming the person both sites share (created for site A, a key at each
 *   site): its answer, and nothing of site A in it (not site A, not the
 *   person's key there). Reads show the person with site B's site only; a
 *   write to what both sites rely on (the contact) is 403 `PERSON_SHARED`;
 *   site B's block acts at site B only.
 * - `list`: for a list, the filters naming site A's rows that site B tries
 *   (answered with none of them), and whether it takes a cursor (site B
 *   sends one made from a site A row: still nothing of site A).
 *
 * PRINCIPAL RULES (every route but `public` ones):
 * | principal | answer |
 * |---|---|
 * | no token, an unknown token | 401 UNAUTHENTICATED |
 * | a revoked token | 401 UNAUTHENTICATED |
 * | an expired token | 401 TOKEN_EXPIRED |
 * | auditor on a `write`, `admin` or `tokenAdmin` route | 403 FORBIDDEN_ROLE |
 * | manager on an `admin` or `tokenAdmin` route | 403 FORBIDDEN_ROLE |
 * | admin of some sites (site B) on an `admin` route (acts on every site) | 403 FORBIDDEN_ROLE |
 * | anyone but an admin on a `self` route naming another token | 404 TOKEN_NOT_FOUND |
 * Then the row's `foreign` / `own` answers.
 *
 * Fixtures absent on purpose (no such row at either site, so `own` is a 404
 * too): notifications, outbox and billing dead letters. They are made by
 * workers this matrix does not run; their routes' scoping is the same SQL
 * scope parameter as the rows present here.
 */

export type Access = 'public' | 'read' | 'write' | 'admin' | 'tokenAdmin' | 'self';

/** The rows of one site the matrix makes once (site A's are attacked, site B's are the attacker's own). */
export interface SiteFixtures {
  readonly site: string;
  readonly gateway: string;
  readonly door: string;
  readonly person: string;
  readonly personName: string;
  readonly key: string;
  readonly room: string;
  readonly plan: string;
  readonly membership: string;
  readonly walkIn: string;
  readonly stay: string;
  readonly webhook: string;
  readonly modeRequest: string;
  readonly alarm: string;
  /** A manager token of the site: what token routes name. */
  readonly token: string;
  /** Unique per call: fresh PINs and names, so repeated creates do not collide. */
  readonly n: () => string;
}

export interface Expect {
  readonly status: number;
  readonly code?: string;
}

export interface Row {
  readonly access: Access;
  readonly params?: (t: SiteFixtures) => Record<string, string>;
  readonly query?: (t: SiteFixtures) => Record<string, string>;
  readonly body?: (t: SiteFixtures, me: SiteFixtures) => unknown;
  readonly headers?: (t: SiteFixtures) => Record<string, string>;
  readonly foreign: Expect;
  readonly own: readonly number[];
  readonly taken?: (t: SiteFixtures, me: SiteFixtures) => unknown;
  readonly list?: { readonly filters: (t: SiteFixtures) => Record<string, string>; readonly cursor: boolean };
  readonly shared?: Shared;
}

/** `t` is site B's fixtures with `person` the shared one; `query` / `body` replace the row's when given. */
export interface Shared {
  readonly answer: Expect | readonly number[];
  readonly query?: (t: SiteFixtures) => Record<string, string>;
  readonly body?: (t: SiteFixtures) => unknown;
}

/** A list filtered by the shared person: site B's own rows of her, if any, and nothing of site A. */
const SHARED_LIST: Shared = { answer: [200], query: (t) => ({ personId: t.person }) };

const nf = (code: string): Expect => ({ status: 404, code });
const EMPTY: Expect = { status: 200 };
const pin = (t: SiteFixtures) => ({ type: 'pin', value: `9${t.n().padStart(7, '0')}` });
const T = Date.UTC(2026, 10, 29, 9, 0, 0);
const DAY = 86_400_000;
let date = 0;
/** A fresh pair of future stay dates per call. */
const dates = () => {
  date += 3;
  const d = (k: number) => new Date(Date.UTC(2031, 0, 1) + (date + k) * DAY).toISOString().slice(0, 10);
  return { checkIn: d(0), checkOut: d(1) };
};

/**
 * The table. Row order is the order the owners' writes run in: reads, then
 * creates, then changes, then what ends a fixture (revoke, retire, cancel).
 */
export const MATRIX: Record<string, Row> = {
  // ---------------------------------------------------------------- public
  'GET /healthz': { access: 'public', foreign: { status: 200 }, own: [200] },
  'GET /readyz': { access: 'public', foreign: { status: 200 }, own: [200, 503] },
  'GET /openapi.json': { access: 'public', foreign: { status: 200 }, own: [200] },
  'GET /.well-known/jwks.json': { access: 'public', foreign: { status: 200 }, own: [200] },
  'GET /pay/return': { access: 'public', query: (t) => ({ stay: t.stay }), foreign: { status: 200 }, own: [200] },
  'POST /webhooks/stripe': { access: 'public', body: () => ({}), foreign: { status: 400 }, own: [400] },

  // ---------------------------------------------------------------- reads
  'GET /sites': { access: 'read', foreign: EMPTY, own: [200] },
  'GET /sites/:siteId': { access: 'read', params: (t) => ({ siteId: t.site }), foreign: nf('SITE_NOT_FOUND'), own: [200] },
  'GET /gateways': { access: 'read', foreign: EMPTY, own: [200], list: { filters: (t) => ({ siteId: t.site }), cursor: false } },
  'GET /gateways/:gatewayId': {
    access: 'read',
    params: (t) => ({ gatewayId: t.gateway }),
    foreign: nf('GATEWAY_NOT_FOUND'),
    own: [200],
  },
  'GET /gateways/:gatewayId/health': {
    access: 'read',
    params: (t) => ({ gatewayId: t.gateway }),
    foreign: nf('GATEWAY_NOT_FOUND'),
    own: [200],
  },
  'GET /gateways/:gatewayId/uplink-key/rotations': {
    access: 'read',
    params: (t) => ({ gatewayId: t.gateway }),
    foreign: nf('GATEWAY_NOT_FOUND'),
    own: [200],
  },
  'GET /gateway-health': {
    access: 'read',
    foreign: EMPTY,
    own: [200],
    list: { filters: (t) => ({ siteId: t.site }), cursor: true },
  },
  'GET /doors': {
    access: 'read',
    foreign: EMPTY,
    own: [200],
    list: { filters: (t) => ({ siteId: t.site, gatewayId: t.gateway }), cursor: false },
  },
  'GET /doors/:doorId': { access: 'read', params: (t) => ({ doorId: t.door }), foreign: nf('DOOR_NOT_FOUND'), own: [200] },
  'GET /people': {
    access: 'read',
    foreign: EMPTY,
    own: [200],
    list: { filters: (t) => ({ siteId: t.site }), cursor: false },
    shared: { answer: [200] },
  },
  'GET /people/:personId': {
    access: 'read',
    params: (t) => ({ personId: t.person }),
    foreign: nf('PERSON_NOT_FOUND'),
    own: [200],
    shared: { answer: [200] },
  },
  'GET /keys': {
    access: 'read',
    foreign: EMPTY,
    own: [200],
    list: { filters: (t) => ({ siteId: t.site, personId: t.person, gatewayId: t.gateway }), cursor: true },
    shared: SHARED_LIST,
  },
  'GET /keys/:keyId': { access: 'read', params: (t) => ({ keyId: t.key }), foreign: nf('KEY_NOT_FOUND'), own: [200] },
  'GET /keys/:keyId/history': { access: 'read', params: (t) => ({ keyId: t.key }), foreign: nf('KEY_NOT_FOUND'), own: [200] },
  'GET /access-events': {
    access: 'read',
    foreign: EMPTY,
    own: [200],
    list: { filters: (t) => ({ siteId: t.site, gatewayId: t.gateway, doorId: t.door, personId: t.person, keyId: t.key }), cursor: true },
    shared: SHARED_LIST,
  },
  'GET /staff-actions': {
    access: 'read',
    foreign: EMPTY,
    own: [200],
    list: { filters: (t) => ({ site: t.site, gatewayId: t.gateway }), cursor: true },
  },
  'GET /dead-letters': {
    access: 'read',
    foreign: EMPTY,
    own: [200],
    list: { filters: (t) => ({ siteId: t.site, gatewayId: t.gateway }), cursor: false },
  },
  'GET /alarms': {
    access: 'read',
    foreign: EMPTY,
    own: [200],
    list: { filters: (t) => ({ siteId: t.site, gatewayId: t.gateway }), cursor: true },
  },
  'GET /rejected-uplinks': {
    access: 'read',
    foreign: EMPTY,
    own: [200],
    list: { filters: (t) => ({ gatewayId: t.gateway }), cursor: true },
  },
  'GET /mode-requests/:requestId': {
    access: 'read',
    params: (t) => ({ requestId: t.modeRequest }),
    foreign: nf('MODE_REQUEST_NOT_FOUND'),
    own: [200],
  },
  'GET /sites/:siteId/mode-requests': {
    access: 'read',
    params: (t) => ({ siteId: t.site }),
    foreign: nf('SITE_NOT_FOUND'),
    own: [200],
  },
  'GET /webhooks': { access: 'read', foreign: EMPTY, own: [200], list: { filters: (t) => ({ siteId: t.site }), cursor: false } },
  'GET /webhooks/:id/deliveries': {
    access: 'read',
    params: (t) => ({ id: t.webhook }),
    foreign: nf('WEBHOOK_NOT_FOUND'),
    own: [200],
  },
  'GET /stays': { access: 'read', foreign: EMPTY, own: [200], list: { filters: (t) => ({ siteId: t.site }), cursor: true } },
  'GET /stays/:stayId': { access: 'read', params: (t) => ({ stayId: t.stay }), foreign: nf('STAY_NOT_FOUND'), own: [200] },
  'GET /stays/:stayId/payments': {
    access: 'read',
    params: (t) => ({ stayId: t.stay }),
    foreign: nf('STAY_NOT_FOUND'),
    own: [200],
  },
  'GET /billing/dead-letters': {
    access: 'read',
    query: () => ({ kind: 'billing-jobs' }),
    foreign: EMPTY,
    own: [200],
    list: { filters: (t) => ({ kind: 'webhook-events', siteId: t.site }), cursor: true },
  },
  'GET /notifications': {
    access: 'read',
    foreign: EMPTY,
    own: [200],
    list: { filters: (t) => ({ siteId: t.site, personId: t.person }), cursor: true },
    shared: SHARED_LIST,
  },
  'GET /notifications/:id': {
    access: 'read',
    params: () => ({ id: '987654321' }),
    foreign: nf('NOTIFICATION_NOT_FOUND'),
    own: [404],
  },
  'GET /plans': { access: 'read', foreign: EMPTY, own: [200], list: { filters: (t) => ({ siteId: t.site }), cursor: true } },
  'GET /plans/:planId': { access: 'read', params: (t) => ({ planId: t.plan }), foreign: nf('PLAN_NOT_FOUND'), own: [200] },
  'GET /plans/:planId/quota': {
    access: 'read',
    params: (t) => ({ planId: t.plan }),
    query: (t) => ({ personId: t.person }),
    foreign: nf('PLAN_NOT_FOUND'),
    own: [200],
    shared: { answer: [200] },
  },
  'GET /memberships': {
    access: 'read',
    foreign: EMPTY,
    own: [200],
    list: { filters: (t) => ({ siteId: t.site, planId: t.plan, personId: t.person }), cursor: true },
    shared: SHARED_LIST,
  },
  'GET /memberships/:membershipId': {
    access: 'read',
    params: (t) => ({ membershipId: t.membership }),
    foreign: nf('MEMBERSHIP_NOT_FOUND'),
    own: [200],
  },
  'GET /walk-ins': {
    access: 'read',
    foreign: EMPTY,
    own: [200],
    list: { filters: (t) => ({ siteId: t.site, planId: t.plan, personId: t.person }), cursor: true },
    shared: SHARED_LIST,
  },
  'GET /walk-ins/:walkInId': {
    access: 'read',
    params: (t) => ({ walkInId: t.walkIn }),
    foreign: nf('WALK_IN_NOT_FOUND'),
    own: [200],
  },
  'GET /sites/:siteId/blocked-people': {
    access: 'read',
    params: (t) => ({ siteId: t.site }),
    foreign: nf('SITE_NOT_FOUND'),
    own: [200],
  },
  'GET /api-tokens/self': { access: 'read', foreign: { status: 200 }, own: [200] },
  'GET /api-tokens': { access: 'tokenAdmin', foreign: EMPTY, own: [200] },
  'GET /signing-keys': { access: 'admin', foreign: { status: 200 }, own: [200] },
  'GET /metrics': { access: 'admin', foreign: { status: 200 }, own: [200] },

  // ---------------------------------------------------------------- creates
  'POST /sites': { access: 'admin', body: (t) => ({ name: `site ${t.n()}` }), foreign: { status: 201 }, own: [201] },
  'POST /gateways': {
    access: 'write',
    body: (t) => ({ gatewayId: `gw-${t.n()}`, siteId: t.site, publicJwk: PUBLIC_JWK }),
    foreign: nf('SITE_NOT_FOUND'),
    own: [201, 409, 422],
    taken: (t, me) => ({ gatewayId: t.gateway, siteId: me.site, publicJwk: PUBLIC_JWK }),
  },
  'POST /doors': {
    access: 'write',
    body: (t) => ({ gatewayId: t.gateway, name: `door ${t.n()}` }),
    foreign: nf('GATEWAY_NOT_FOUND'),
    own: [201],
    taken: (t, me) => ({ id: t.door, gatewayId: me.gateway, name: 'x' }),
  },
  'POST /people': {
    access: 'write',
    body: (t) => ({ name: `person ${t.n()}`, siteId: t.site }),
    foreign: nf('SITE_NOT_FOUND'),
    own: [201],
    taken: (t, me) => ({ id: t.person, name: 'x', siteId: me.site }),
    shared: { answer: { status: 422, code: 'ALREADY_EXISTS' }, body: (t) => ({ id: t.person, name: 'x', siteId: t.site }) },
  },
  'POST /keys': {
    access: 'write',
    body: (t) => ({ personId: t.person, doors: [t.door], credential: pin(t), validFrom: T, validUntil: T + DAY }),
    foreign: nf('PERSON_NOT_FOUND'),
    own: [202],
    taken: (t, me) => ({ keyId: t.key, personId: me.person, doors: [me.door], credential: pin(me), validFrom: T, validUntil: T + DAY }),
    shared: { answer: [202] },
  },
  'POST /rooms': {
    access: 'write',
    body: (t) => ({ siteId: t.site, name: `room ${t.n()}`, doors: [t.door] }),
    foreign: nf('SITE_NOT_FOUND'),
    own: [201],
    taken: (t, me) => ({ id: t.room, siteId: me.site, name: `room ${me.n()}`, doors: [me.door] }),
  },
  'POST /plans': {
    access: 'write',
    body: (t) => ({ siteId: t.site, name: `plan ${t.n()}`, amount: 1000, currency: 'jpy', interval: 'month', doors: [t.door] }),
    foreign: nf('SITE_NOT_FOUND'),
    own: [201],
    taken: (t, me) => ({
      id: t.plan,
      siteId: me.site,
      name: `plan ${me.n()}`,
      amount: 1000,
      currency: 'jpy',
      interval: 'month',
      doors: [me.door],
    }),
  },
  'POST /memberships': {
    access: 'write',
    body: (t) => ({ planId: t.plan, personId: t.person }),
    foreign: nf('PLAN_NOT_FOUND'),
    own: [201, 200],
    taken: (t, me) => ({ id: t.membership, planId: me.plan, personId: me.person }),
    shared: { answer: [201, 200] },
  },
  'POST /walk-ins': {
    access: 'write',
    body: (t) => ({ siteId: t.site, planId: t.plan, personId: t.person, credential: pin(t) }),
    foreign: nf('SITE_NOT_FOUND'),
    own: [202, 422],
    taken: (t, me) => ({ id: t.walkIn, siteId: me.site, planId: me.plan, personId: me.person, credential: pin(me) }),
    shared: { answer: [202] },
  },
  'POST /stays': {
    access: 'write',
    body: (t) => ({ personId: t.person, roomId: t.room, ...dates(), amount: 10_000, currency: 'jpy' }),
    headers: (t) => ({ 'idempotency-key': `bk-${t.n()}` }),
    foreign: nf('ROOM_NOT_FOUND'),
    own: [202, 422],
    shared: { answer: [202] },
  },
  'POST /webhooks': {
    access: 'write',
    body: (t) => ({ siteId: t.site, url: 'http://127.0.0.1:9/hook', events: ['alarm'] }),
    foreign: nf('SITE_NOT_FOUND'),
    own: [201],
  },
  'POST /api-tokens': {
    access: 'tokenAdmin',
    body: (t) => ({ name: `tok ${t.n()}`, role: 'auditor', sites: [t.site] }),
    foreign: { status: 403, code: 'FORBIDDEN_ROLE' },
    own: [201],
  },

  // ---------------------------------------------------------------- changes
  'PUT /sites/:siteId/stay-settings': {
    access: 'write',
    params: (t) => ({ siteId: t.site }),
    body: () => ({ holdMinutes: 30 }),
    foreign: nf('SITE_NOT_FOUND'),
    own: [200],
  },
  'PUT /sites/:siteId/locale': {
    access: 'write',
    params: (t) => ({ siteId: t.site }),
    body: () => ({ locale: 'en' }),
    foreign: nf('SITE_NOT_FOUND'),
    own: [200],
  },
  'PUT /people/:personId/contact': {
    access: 'write',
    params: (t) => ({ personId: t.person }),
    body: () => ({ email: 'guest@example.com', locale: 'ja' }),
    foreign: nf('PERSON_NOT_FOUND'),
    own: [200],
    shared: { answer: { status: 403, code: 'PERSON_SHARED' } },
  },
  'POST /sites/:siteId/mode': {
    access: 'write',
    params: (t) => ({ siteId: t.site }),
    body: () => ({ mode: 'normal', reason: 'matrix' }),
    foreign: nf('SITE_NOT_FOUND'),
    own: [202],
  },
  'POST /modes': { access: 'write', body: () => ({ mode: 'normal', reason: 'matrix' }), foreign: { status: 202 }, own: [202] },
  'POST /gateways/:gatewayId/broker-credentials': {
    access: 'write',
    params: (t) => ({ gatewayId: t.gateway }),
    foreign: nf('GATEWAY_NOT_FOUND'),
    own: [422],
  },
  'POST /gateways/:gatewayId/uplink-key/rotate': {
    access: 'write',
    params: (t) => ({ gatewayId: t.gateway }),
    foreign: nf('GATEWAY_NOT_FOUND'),
    own: [202, 409],
  },
  // minting a phone credential opens doors: not for read-only tokens
  'POST /keys/:keyId/mobile-token': {
    access: 'write',
    params: (t) => ({ keyId: t.key }),
    body: () => ({}),
    foreign: nf('KEY_NOT_FOUND'),
    own: [422],
  },
  'POST /alarms/:alarmId/ack': {
    access: 'write',
    params: (t) => ({ alarmId: t.alarm }),
    foreign: nf('ALARM_NOT_FOUND'),
    own: [200],
  },
  'POST /dead-letters/:id/retry': {
    access: 'write',
    params: () => ({ id: '987654321' }),
    foreign: nf('DEAD_LETTER_NOT_FOUND'),
    own: [404],
  },
  'POST /notifications/:id/retry': {
    access: 'write',
    params: () => ({ id: '987654321' }),
    foreign: nf('NOTIFICATION_NOT_FOUND'),
    own: [404],
  },
  'POST /billing/dead-letters/:kind/:id/retry': {
    access: 'admin',
    params: () => ({ kind: 'billing-jobs', id: '987654321' }),
    foreign: nf('DEAD_LETTER_NOT_FOUND'),
    own: [404],
  },
  'PUT /sites/:siteId/blocked-people/:personId': {
    access: 'write',
    params: (t) => ({ siteId: t.site, personId: t.person }),
    body: () => ({ reason: 'matrix' }),
    foreign: nf('SITE_NOT_FOUND'),
    own: [200],
    shared: { answer: [200] },
  },
  'DELETE /sites/:siteId/blocked-people/:personId': {
    access: 'write',
    params: (t) => ({ siteId: t.site, personId: t.person }),
    foreign: nf('SITE_NOT_FOUND'),
    own: [200],
    shared: { answer: [200] },
  },
  'POST /stays/:stayId/check-in': {
    access: 'write',
    params: (t) => ({ stayId: t.stay }),
    foreign: nf('STAY_NOT_FOUND'),
    own: [422],
  },
  'POST /stays/:stayId/check-out': {
    access: 'write',
    params: (t) => ({ stayId: t.stay }),
    foreign: nf('STAY_NOT_FOUND'),
    own: [422, 200],
  },
  'POST /memberships/:membershipId/approve': {
    access: 'write',
    params: (t) => ({ membershipId: t.membership }),
    foreign: nf('MEMBERSHIP_NOT_FOUND'),
    own: [200, 503],
  },
  'POST /memberships/:membershipId/self-cancel': {
    access: 'write',
    params: (t) => ({ membershipId: t.membership }),
    body: () => ({}),
    foreign: nf('MEMBERSHIP_NOT_FOUND'),
    own: [200, 422],
  },
  'POST /signing-keys/resign': { access: 'admin', foreign: { status: 200 }, own: [200] },
  'POST /signing-keys/:kid/publish': {
    access: 'admin',
    params: () => ({ kid: 'no-such-kid' }),
    foreign: nf('SIGNING_KEY_NOT_FOUND'),
    own: [404],
  },
  'POST /signing-keys/:kid/switch': {
    access: 'admin',
    params: () => ({ kid: 'no-such-kid' }),
    body: () => ({}),
    foreign: nf('SIGNING_KEY_NOT_FOUND'),
    own: [404],
  },
  'POST /signing-keys/:kid/retire': {
    access: 'admin',
    params: () => ({ kid: 'no-such-kid' }),
    foreign: nf('SIGNING_KEY_NOT_FOUND'),
    own: [404],
  },
  'POST /api-tokens/:id/rotate': {
    access: 'self',
    params: (t) => ({ id: t.token }),
    body: () => ({ graceSeconds: 600 }),
    foreign: nf('TOKEN_NOT_FOUND'),
    own: [201, 422],
  },

  // ---------------------------------------------------------------- what ends a fixture
  'POST /webhooks/:id/disable': {
    access: 'write',
    params: (t) => ({ id: t.webhook }),
    foreign: nf('WEBHOOK_NOT_FOUND'),
    own: [200],
  },
  'POST /keys/:keyId/revoke': {
    access: 'write',
    params: (t) => ({ keyId: t.key }),
    body: () => ({ reason: 'staff_revoked' }),
    foreign: nf('KEY_NOT_FOUND'),
    own: [202, 200],
  },
  'POST /walk-ins/:walkInId/cancel': {
    access: 'write',
    params: (t) => ({ walkInId: t.walkIn }),
    body: () => ({ reason: 'staff_cancelled' }),
    foreign: nf('WALK_IN_NOT_FOUND'),
    own: [422, 200],
  },
  'POST /stays/:stayId/cancel': {
    access: 'write',
    params: (t) => ({ stayId: t.stay }),
    body: () => ({ reason: 'staff_cancelled' }),
    foreign: nf('STAY_NOT_FOUND'),
    own: [422, 202, 200],
  },
  'POST /memberships/:membershipId/reject': {
    access: 'write',
    params: (t) => ({ membershipId: t.membership }),
    body: () => ({ note: 'matrix' }),
    foreign: nf('MEMBERSHIP_NOT_FOUND'),
    own: [200, 422, 409],
  },
  'POST /memberships/:membershipId/force-cancel': {
    access: 'write',
    params: (t) => ({ membershipId: t.membership }),
    body: () => ({ note: 'matrix' }),
    foreign: nf('MEMBERSHIP_NOT_FOUND'),
    own: [200, 422],
  },
  'POST /plans/:planId/retire': {
    access: 'write',
    params: (t) => ({ planId: t.plan }),
    foreign: nf('PLAN_NOT_FOUND'),
    own: [200],
  },
  'POST /api-tokens/:id/revoke': {
    access: 'tokenAdmin',
    params: (t) => ({ id: t.token }),
    foreign: nf('TOKEN_NOT_FOUND'),
    own: [200, 404],
  },
};

/** A valid Ed25519 public JWK (never used to verify anything here). */
export const PUBLIC_JWK = {
  kty: 'OKP',
  crv: 'Ed25519',
  x: 'N3rReLRkfYEkv1TgoA86MQuBbSorSbZiiiyVqgXaIH8',
  kid: 'Qf0bbOpjh3Wbqi_ickKnlG0loJ5WMJYAAeBLQ2wluak',
  alg: 'EdDSA',
  use: 'sig',
};
