/**
 * THE authorization table of the gateway's HTTP routes: for every route the
 * server registers, what each kind of caller is answered. The test next to
 * it (staff-authz-matrix.test.ts) reads the route list from the running
 * gateway (Fastify's own onRoute records, not a list kept by hand), sends
 * every route × every principal over real HTTP, and compares with this
 * table. A route the server has and this table does not fails the test, as
 * does an entry for a route that no longer exists: a new route cannot be
 * added without deciding, here, who may call it.
 *
 * An answer is `"<status>"` or `"<status> <code>"`. Requests are chosen so
 * that an allowed caller passes every check of who it is and then meets a
 * harmless refusal (an unknown lock, door, alarm or account) or a harmless
 * change (lockdown), so each cell shows the authorization decision, not the
 * business rule.
 *
 * Principals:
 * - none: no cookie, no Authorization header
 * - staff: a staff member's session (cookie, and the CSRF token on writes)
 * - supervisor: a supervisor's session (likewise)
 * - token: the staff API token (automation; acts as staff, never more)
 * - expired: a session cookie past its idle timeout
 * - revoked: the API token as it was before it was rotated (no longer configured)
 * - metrics: the metrics token (good for /metrics only)
 */

import { SUPERVISOR } from './ui-browser.js';

/**
 * The supervisor's own password, sent where a route asks the acting supervisor to re-authenticate: the
 * supervisor's cell then shows the harmless refusal past it (staff-reauth.test.ts holds the re-authentication).
 */
const currentPassword = SUPERVISOR.password;

export const PRINCIPALS = ['none', 'staff', 'supervisor', 'token', 'expired', 'revoked', 'metrics'] as const;
export type Principal = (typeof PRINCIPALS)[number];
export type Row = Readonly<Record<Principal, string>>;

export interface Entry {
  /** The path sent (route parameters filled in). */
  readonly path: string;
  /** The JSON body sent, per principal when it must differ (a sign-in throttle counts per name). */
  readonly body?: unknown;
  readonly answers: Row;
}

const U = '401 UNAUTHORIZED';
const all = (a: string): Row => ({ none: a, staff: a, supervisor: a, token: a, expired: a, revoked: a, metrics: a });
/** Any staff caller (both roles, the API token); everyone else 401. */
const anyStaff = (a: string): Row => ({ none: U, staff: a, supervisor: a, token: a, expired: U, revoked: U, metrics: U });
/** Supervisors' sessions only; a staff member and the API token get `refused`. */
const supervisorOnly = (a: string, refused = '403 NOT_SUPERVISOR'): Row => ({
  none: U,
  staff: refused,
  supervisor: a,
  token: refused,
  expired: U,
  revoked: U,
  metrics: U,
});

/** Keyed `"METHOD url"` exactly as Fastify registered the route. */
export const MATRIX: Readonly<Record<string, Entry>> = {
  // open: monitoring and the page's files
  'GET /healthz': { path: '/healthz', answers: all('503') },
  'GET /metrics': { path: '/metrics', answers: { ...all(U), metrics: '200' } },
  'GET /': { path: '/', answers: all('302') },
  'GET /ui': { path: '/ui', answers: all('302') },
  'GET /ui/': { path: '/ui/', answers: all('200') },
  'GET /ui/app.js': { path: '/ui/app.js', answers: all('200') },
  'GET /ui/app.css': { path: '/ui/app.css', answers: all('200') },
  'GET /ui/messages.js': { path: '/ui/messages.js', answers: all('200') },

  // open: sign-in and setup (a caller's credentials change nothing here)
  'GET /staff/setup': { path: '/staff/setup', answers: all('200') },
  'POST /staff/setup': {
    path: '/staff/setup',
    body: { code: 'AAAA-BBBB-CCCC-DDDD', username: 'intruder', displayName: 'Intruder', password: 'a long enough password' },
    answers: all('409 SETUP_ALREADY_DONE'),
  },
  'POST /staff/session': { path: '/staff/session', answers: all('401 BAD_CREDENTIALS') },
  'POST /staff/session/totp': {
    path: '/staff/session/totp',
    body: { challenge: 'not-a-challenge-of-this-gateway', code: '000000' },
    answers: all('401 TOTP_CHALLENGE_INVALID'),
  },
  'POST /staff/session/totp/enrolment': {
    path: '/staff/session/totp/enrolment',
    body: { challenge: 'not-a-challenge-of-this-gateway' },
    answers: all('401 TOTP_CHALLENGE_INVALID'),
  },

  // the session itself
  'GET /staff/session': { path: '/staff/session', answers: anyStaff('200') },
  'DELETE /staff/session': { path: '/staff/session', answers: anyStaff('200') },
  'POST /staff/session/password': {
    path: '/staff/session/password',
    body: { currentPassword: 'not the current one', newPassword: 'an entirely new passphrase' },
    answers: { ...anyStaff('403 CURRENT_PASSWORD_WRONG'), token: '403 SESSION_REQUIRED' },
  },

  // a supervisor's own second factor: a session (the API token has none), a supervisor's (staff have none to enrol);
  // confirm comes first, while nothing is pending, then the harmless start of an enrolment (pending is never asked)
  'POST /staff/totp/enrolment/confirm': {
    path: '/staff/totp/enrolment/confirm',
    body: { code: '000000' },
    answers: { ...supervisorOnly('409 TOTP_NOT_ENROLLING'), token: '403 SESSION_REQUIRED' },
  },
  'POST /staff/totp/enrolment': {
    path: '/staff/totp/enrolment',
    body: { currentPassword },
    answers: { ...supervisorOnly('200'), token: '403 SESSION_REQUIRED' },
  },
  'POST /staff/totp/disable': {
    path: '/staff/totp/disable',
    body: { password: 'not the current one', code: '000000' },
    answers: { ...supervisorOnly('403 CURRENT_PASSWORD_WRONG'), token: '403 SESSION_REQUIRED' },
  },

  // reads: every staff caller
  'GET /staff/status': { path: '/staff/status', answers: anyStaff('200') },
  'GET /staff/locks': { path: '/staff/locks', answers: anyStaff('200') },
  'GET /staff/access-events': { path: '/staff/access-events', answers: anyStaff('200') },
  'GET /staff/alarms': { path: '/staff/alarms', answers: anyStaff('200') },
  'GET /staff/inbox/failed': { path: '/staff/inbox/failed', answers: anyStaff('200') },
  'GET /staff/rejected': { path: '/staff/rejected', answers: anyStaff('200') },
  'GET /staff/lock-refusals': { path: '/staff/lock-refusals', answers: anyStaff('200') },
  'GET /staff/keys': { path: '/staff/keys', answers: anyStaff('200') },
  'GET /staff/events': { path: '/staff/events', answers: anyStaff('200') },

  // actions every staff caller may take: closing is safe (lifting a cloud lockdown is not: staff-trust.test.ts)
  'POST /staff/mode': { path: '/staff/mode', body: { mode: 'lockdown', reason: 'authorization matrix' }, answers: anyStaff('200') },
  'POST /staff/alarms/:alarmId/ack': { path: '/staff/alarms/no-such-alarm/ack', body: {}, answers: anyStaff('404 ALARM_NOT_FOUND') },

  // supervisors only
  'POST /staff/locks/:lockId/unlock': {
    path: '/staff/locks/no-such-lock/unlock',
    body: { reason: 'authorization matrix' },
    answers: supervisorOnly('404 LOCK_NOT_FOUND'),
  },
  'POST /staff/passage': {
    path: '/staff/passage',
    body: { doorId: 'no-such-door', schedule: null },
    answers: supervisorOnly('404 DOOR_NOT_FOUND'),
  },
  'GET /staff/accounts': { path: '/staff/accounts', answers: supervisorOnly('200') },
  'POST /staff/accounts': {
    path: '/staff/accounts',
    body: { username: 'matrix-made', displayName: 'Made by the matrix', role: 'staff', password: 'a long passphrase of words' },
    answers: supervisorOnly('201'),
  },
  'POST /staff/accounts/:accountId/disable': {
    path: '/staff/accounts/no-such-account/disable',
    answers: supervisorOnly('404 ACCOUNT_NOT_FOUND'),
  },
  'POST /staff/accounts/:accountId/enable': {
    path: '/staff/accounts/no-such-account/enable',
    answers: supervisorOnly('404 ACCOUNT_NOT_FOUND'),
  },
  'POST /staff/accounts/:accountId/totp/reset': {
    path: '/staff/accounts/no-such-account/totp/reset',
    body: { reason: 'authorization matrix', currentPassword },
    answers: supervisorOnly('404 ACCOUNT_NOT_FOUND'),
  },
  'POST /staff/accounts/:accountId/password': {
    path: '/staff/accounts/no-such-account/password',
    body: { password: 'a long passphrase of words', currentPassword },
    answers: supervisorOnly('404 ACCOUNT_NOT_FOUND'),
  },
};
