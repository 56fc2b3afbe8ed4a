// @ts-check
/**
 * The gateway's staff web UI: one ES module, no framework, no build step.
 *
 * Rules this file keeps:
 * - Every value from the API goes into the page as text (`el()` / textContent),
 *   never through innerHTML, so a lock id or a code cannot inject markup.
 * - Each person signs in with their own account: the session is an HttpOnly
 *   cookie this script never sees; every state-changing call carries the
 *   session's CSRF token (`X-CSRF-Token`, kept in memory only); 401 sends the
 *   user back to sign in. What a role may do is decided by the gateway:
 *   hidden buttons are only a convenience.
 * - Data is never shown as current when the gateway stopped answering: the
 *   banner turns to "status unknown" and the age of what is shown is stated.
 *
 * The tables at the top are exported so a test can check them against the
 * gateway's code tables; the page itself starts only in a browser.
 */

/** Plain words for every access decision code (shared/src/codes.ts DECISION_CODES). */
export const DECISION_WORDS = Object.freeze({
  ALLOWED: 'Allowed: the door was unlocked',
  UNKNOWN_CREDENTIAL: 'Unknown PIN or card: no key on this site has it',
  KEY_REVOKED: 'Key was revoked',
  KEY_NOT_YET_VALID: 'Key is not valid yet (it starts later)',
  KEY_EXPIRED: 'Key has expired',
  OUTSIDE_SCHEDULE: 'Key is not valid at this time of the week',
  DOOR_NOT_PERMITTED: 'Key does not open this door',
  SITE_LOCKDOWN: 'Site is in lockdown: only staff master keys open doors',
  REMOTE_UNLOCK: 'Opened remotely by a supervisor',
  CLOUD_STALE: 'Refused because the gateway is not in sync with the cloud (failing closed)',
  LOCKED_OUT: 'Too many wrong tries at this lock, or with this kind of credential across the site: it is cooling down',
  BAD_REQUEST: 'The lock sent a malformed request',
  RATE_LIMITED: 'The lock sent too many requests too fast: refused without deciding',
  STORAGE_FULL: 'Refused because the gateway is almost out of disk space (only staff master keys open)',
  PASSAGE_UNLOCK: 'Passage mode: the door is held unlocked during its schedule',
  PASSAGE_RELOCK: 'Passage mode ended: the door was locked again',
  PRIVACY_ACTIVE: 'The guest inside set privacy (do not disturb): staff keys are refused',
  PRIVACY_OVERRIDE: 'Emergency: a supervisor opened a door the guest had set to privacy',
});

/**
 * Where the site mode and passage came from (`modeOrigin` / `passage` of
 * /staff/status), kept together so they move into the ja/en catalogues as one block.
 */
export const MODE_ORIGIN_WORDS = Object.freeze({
  gateway: 'set here at the gateway',
  cloud: 'set from the cloud',
  by: 'by',
  never: 'never changed',
  passage: 'Passage (held unlocked on a schedule)',
  held: 'held open now',
  notHeld: 'locked now',
});

/** Why the doors fail closed (`failClosedReason` of /staff/status): a title and what to do. */
export const FAIL_CLOSED_WORDS = Object.freeze({
  NO_LEASE: {
    title: 'no proof of sync with the cloud yet',
    detail:
      'The gateway has not yet heard from the cloud since it was set up, so it cannot know which keys are valid and refuses ordinary keys. Check that the gateway is connected to the internet; doors work again by themselves as soon as the cloud answers.',
  },
  LEASE_EXPIRED: {
    title: 'lost contact with the cloud',
    detail:
      'The gateway has not heard from the cloud for longer than the allowed offline time, so it cannot be sure no key was revoked and refuses ordinary keys. Check the internet connection (see "Cloud" below); doors recover by themselves once the cloud is reachable. If failed messages show under Problems, call support.',
  },
  BEHIND_CLOUD: {
    title: 'the gateway is missing key changes the cloud has made',
    detail:
      'The cloud has made key changes (such as a revoked key) that have not reached this gateway, so it cannot be sure which keys are still valid and refuses ordinary keys. It asks the cloud for them by itself; if this does not clear within minutes while the cloud is reachable, call support (the cloud operator sees the undelivered message).',
  },
  SEQ_CONFLICT: {
    title: 'the gateway and the cloud disagree on the key history',
    detail:
      "The cloud's record of keys differs from this gateway's (for example after the cloud's database was restored), so ordinary keys are refused until the cloud sends a full key list. This normally clears by itself within minutes while the cloud is reachable; if it does not, call support.",
  },
});

/** Alarm kinds in plain words (shared AlarmKind). */
export const ALARM_WORDS = Object.freeze({
  door_ajar: 'Door left open',
  forced_open: 'Door forced open',
  tamper: 'Lock tampered with',
  jam: 'Bolt jammed',
  low_battery: 'Battery low',
});

/**
 * Plain words for a decision code; an unknown code is shown as it is.
 * @param {string} code
 * @returns {string}
 */
export function decisionWords(code) {
  return Object.prototype.hasOwnProperty.call(DECISION_WORDS, code)
    ? DECISION_WORDS[/** @type {keyof typeof DECISION_WORDS} */ (code)]
    : `Unrecognised code ${code}`;
}

/**
 * @param {string} kind
 * @returns {string}
 */
export function alarmWords(kind) {
  return Object.prototype.hasOwnProperty.call(ALARM_WORDS, kind) ? ALARM_WORDS[/** @type {keyof typeof ALARM_WORDS} */ (kind)] : kind;
}

const REFRESH_MS = 5000;
const PAGE = 50;

/** An answer other than 2xx, or no answer at all (status 0). */
class ApiError extends Error {
  /**
   * @param {number} status
   * @param {string} code
   * @param {string} [detail]
   * @param {any} [body]
   */
  constructor(status, code, detail, body) {
    super(`${status} ${code}${detail ? `: ${detail}` : ''}`);
    this.status = status;
    this.code = code;
    this.detail = detail;
    this.body = body;
  }
}

/**
 * Calls the staff API with the token from sessionStorage.
 * @param {string} path
 * @param {{ method?: string, body?: unknown }} [opts]
 * @returns {Promise<any>}
 */
async function api(path, opts = {}) {
  /** @type {Record<string, string>} */
  const headers = { accept: 'application/json' };
  const method = opts.method ?? 'GET';
  if (method !== 'GET' && state.me !== null) headers['x-csrf-token'] = state.me.csrfToken;
  /** @type {RequestInit} */
  const init = { method, headers, cache: 'no-store', credentials: 'same-origin', signal: AbortSignal.timeout(8000) };
  if (opts.body !== undefined) {
    headers['content-type'] = 'application/json';
    init.body = JSON.stringify(opts.body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch {
    throw new ApiError(0, 'GATEWAY_UNREACHABLE');
  }
  /** @type {any} */
  const json = await res.json().catch(() => null);
  if (!res.ok)
    throw new ApiError(
      res.status,
      typeof json?.code === 'string' ? json.code : `HTTP_${res.status}`,
      typeof json?.detail === 'string' ? json.detail : undefined,
      json,
    );
  return json;
}

// ---------------------------------------------------------------- DOM helpers (text only)

/**
 * Builds an element; strings among the children become text nodes.
 * @param {string} tag
 * @param {{ class?: string, title?: string, data?: Record<string, string> } | null} [attrs]
 * @param {...(Node | string | null | undefined | false)} children
 * @returns {HTMLElement}
 */
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  if (attrs?.class) e.className = attrs.class;
  if (attrs?.title) e.title = attrs.title;
  if (attrs?.data) for (const [k, v] of Object.entries(attrs.data)) e.dataset[k] = v;
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    e.append(typeof c === 'string' ? document.createTextNode(c) : c);
  }
  return e;
}

/**
 * @template {HTMLElement} T
 * @param {string} id
 * @returns {T}
 */
function $(id) {
  const e = document.getElementById(id);
  if (e === null) throw new Error(`#${id} missing`);
  return /** @type {T} */ (e);
}

/**
 * @param {HTMLElement} e
 * @param {string} text
 */
function setText(e, text) {
  e.textContent = text;
}

// ---------------------------------------------------------------- time

/** The zone `/staff/status` names (undefined: none; times are then in the browser's zone). */
/** @type {string | undefined} */
let timeZone;
/** @type {{ format: Intl.DateTimeFormat, site: boolean }} */
let dateFormat = makeFormat(undefined);

/**
 * The site's zone when there is one and this browser knows it, else the browser's own.
 * @param {string | undefined} tz
 * @returns {{ format: Intl.DateTimeFormat, site: boolean }}
 */
function makeFormat(tz) {
  /** @type {Intl.DateTimeFormatOptions} */
  const o = { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' };
  if (tz !== undefined) {
    try {
      return { format: new Intl.DateTimeFormat(undefined, { ...o, timeZone: tz }), site: true };
    } catch {
      // a zone this browser's time zone data does not have: the header says the device's zone is used
    }
  }
  return { format: new Intl.DateTimeFormat(undefined, o), site: false };
}

/**
 * Takes the `timeZone` of a `/staff/status` answer (null, or absent from an older gateway: none).
 * @param {unknown} zone
 * @returns {boolean} true when it changed, so times already drawn must be drawn again
 */
function useTimeZone(zone) {
  const tz = typeof zone === 'string' ? zone : undefined;
  if (tz === timeZone) return false;
  timeZone = tz;
  dateFormat = makeFormat(tz);
  return true;
}

/** The header names the zone every time on the page is in, so staff know which clock they read. */
function drawTimeZone() {
  const shown = dateFormat.format.resolvedOptions().timeZone;
  const e = $('time-zone');
  e.dataset.zone = shown;
  e.dataset.source = dateFormat.site ? 'site' : 'device';
  if (dateFormat.site) setText(e, `Times: ${shown} (site time)`);
  else if (timeZone !== undefined)
    setText(e, `Times: ${shown} (this device's zone; this browser does not know the site's zone ${timeZone})`);
  else setText(e, `Times: ${shown} (this device's zone; the gateway does not know the site's zone)`);
}

/**
 * Date and time, in the site's zone when the API names one, else the browser's.
 * @param {number | null | undefined} ms
 * @returns {string}
 */
function fmtTime(ms) {
  if (ms === null || ms === undefined || ms <= 0) return 'never';
  return dateFormat.format.format(new Date(ms));
}

/**
 * @param {number} seconds
 * @returns {string}
 */
function fmtDuration(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  const d = Math.floor(s / 86400);
  const h = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  const r = s % 60;
  if (d > 0) return `${d} d ${h} h`;
  if (h > 0) return `${h} h ${m} min`;
  if (m > 0) return `${m} min ${r} s`;
  return `${r} s`;
}

// ---------------------------------------------------------------- state

/**
 * @typedef {{ gatewayId: string, now: number, mode: 'normal' | 'lockdown', cloudConnected: boolean, siteConnected: boolean,
 *   appliedSeq: number, leaseExpiresAt: number | null, leaseRemainingSeconds: number, failClosed: boolean,
 *   failClosedReason: string | null, waitingOnGap: boolean, newestVerifiedIatMs: number, lastResyncAt: number | null,
 *   inboxDepth: number, outboxDepth: number, inboxFailed: number, rejectedDownlinks: number, lockRefusals: number,
 *   openAlarms: number, locksTotal: number, locksOnline: number, timeZone?: string | null,
 *   storage?: { low: boolean, freeBytes: number | null, minFreeBytes: number } }} Status
 */

/**
 * @typedef {{ accountId: string | null, username: string, displayName: string, role: 'staff' | 'supervisor' }} Me
 * @typedef {{ accountId: string, username: string, displayName: string, role: 'staff' | 'supervisor', disabled: boolean,
 *   disabledAt: number | null, createdAt: number, createdBy: string }} Account
 */

const state = {
  /** The signed-in person and the session's CSRF token (memory only). @type {{ account: Me, csrfToken: string } | null} */
  me: null,
  /** @type {Status | null} */
  status: null,
  /** performance.now() when `status` arrived (the lease counts down from there). */
  statusAtMono: 0,
  /** Wall-clock ms of the last complete refresh. */
  lastOkAt: 0,
  /** Wall-clock ms of the first failure since the last success (null while answering). */
  failingSince: /** @type {number | null} */ (null),
  failCode: '',
  tab: 'locks',
  /** @type {number | undefined} */
  timer: undefined,
  /** @type {number | undefined} */
  ticker: undefined,
  running: false,
  inFlight: /** @type {Promise<void> | null} */ (null),
  queued: /** @type {Promise<void> | null} */ (null),
};

// ---------------------------------------------------------------- paged lists

/**
 * One paginated list (`{ items, nextCursor }`): a refresh merges the newest
 * page into what is shown (so "load more" pages stay), load more follows the
 * cursor. If the newest page does not reach what is shown, rows may be
 * missing in between: the list starts over from the newest page.
 * @template T
 */
class PagedList {
  /**
   * @param {{ path: string, name: string, key: (item: T) => string, order: (a: T, b: T) => number,
   *   render: (item: T) => HTMLElement, params?: () => Record<string, string> }} o
   */
  constructor(o) {
    this.o = o;
    /** @type {Map<string, T>} */
    this.items = new Map();
    /** @type {string | null} */
    this.cursor = null;
    this.loaded = false;
    /** Bumped by reset(): an answer to a request made before it is dropped. */
    this.generation = 0;
  }

  /** @param {Record<string, string>} extra */
  url(extra) {
    const q = new URLSearchParams({ limit: String(PAGE), ...(this.o.params?.() ?? {}), ...extra });
    return `${this.o.path}?${q.toString()}`;
  }

  reset() {
    this.generation++;
    this.items.clear();
    this.cursor = null;
    this.loaded = false;
    this.draw();
  }

  async refresh() {
    const gen = this.generation;
    /** @type {{ items: T[], nextCursor: string | null }} */
    const page = await api(this.url({}));
    if (gen !== this.generation) return;
    const last = page.items[page.items.length - 1];
    const gap = !this.loaded || page.nextCursor === null || last === undefined || !this.items.has(this.o.key(last));
    if (gap) {
      this.items.clear();
      this.cursor = page.nextCursor;
    }
    for (const it of page.items) this.items.set(this.o.key(it), it);
    this.loaded = true;
    this.draw();
  }

  async more() {
    if (this.cursor === null) return;
    const gen = this.generation;
    /** @type {{ items: T[], nextCursor: string | null }} */
    const page = await api(this.url({ cursor: this.cursor }));
    if (gen !== this.generation) return;
    for (const it of page.items) this.items.set(this.o.key(it), it);
    this.cursor = page.nextCursor;
    this.draw();
  }

  draw() {
    const list = $(`${this.o.name}-list`);
    const rows = [...this.items.values()].sort(this.o.order).map((it) => this.o.render(it));
    list.replaceChildren(...rows);
    $(`${this.o.name}-empty`).hidden = !this.loaded || rows.length > 0;
    $(`${this.o.name}-more`).hidden = this.cursor === null;
  }
}

/**
 * @param {number} a
 * @param {number} b
 */
const desc = (a, b) => b - a;

/**
 * @typedef {{ eventId: string, at: number, lockId: string, doorId: string | null, requestId: string, allowed: boolean,
 *   code: string, keyId: string | null, personId: string | null, credentialType: string | null,
 *   by?: { accountId: string, name: string, reason: string } | null }} AccessEvent
 * @typedef {{ alarmId: string, lockId: string, doorId: string | null, kind: string, status: 'open' | 'closed', at: number,
 *   receivedAt: number, closedAt: number | null, closedBy: string | null }} Alarm
 * @typedef {{ jti: string, type: string, seq: number | null, keyId: string | null, keyVersion: number | null, attempts: number,
 *   code: string | null, lastError: string | null, receivedAt: number, failedAt: number, cid: string }} FailedRow
 * @typedef {{ id: number, at: number, topic: string, code: string, detail: string, bytes: number,
 *   claimedJti: string | null, claimedCid: string | null, claimedType: string | null, claimedSeq: number | null,
 *   claimedIssuer: string | null }} Rejected
 * @typedef {{ id: number, at: number, origin: 'gateway' | 'lock', lockId: string | null, channel: string, topic: string,
 *   code: string, detail: string, bytes: number }} Refusal
 * @typedef {{ lockId: string, doorId: string | null, online: boolean,
 *   state: { bolt: string | null, door: string | null, battery: number | null, at: number | null },
 *   lockout: { failures: number, lockedOutUntil: number | null, lockedOut: boolean }, openAlarms: number, updatedAt: number }} Lock
 */

/**
 * @param {string} label
 * @param {string} value
 */
const fact = (label, value) => el('span', { class: 'meta-item' }, el('span', { class: 'meta-label' }, `${label} `), value);

/**
 * When and at which door and lock something happened: the first facts of an access event and of an alarm.
 * @param {{ at: number, doorId: string | null, lockId: string }} x
 */
const whereAndWhen = (x) => [fact('When', fmtTime(x.at)), fact('Door', x.doorId ?? '–'), fact('Lock', x.lockId)];

/**
 * One row of a staff list (access events, alarms, failed inbox rows, rejected
 * messages, lock refusals): a badge, then the title, the facts and what
 * follows them (`below`), then what stands beside the row (`after`).
 * @param {{ tone: string, badge: [string, string], data?: Record<string, string>, title: string | null,
 *   facts: (Node | string | null | false)[], below?: (Node | string | null | false)[], after?: Node | null }} r
 */
function listRow({ tone, badge, data, title, facts, below = [], after = null }) {
  return el(
    'li',
    data === undefined ? { class: `row ${tone}` } : { class: `row ${tone}`, data },
    el('span', { class: `badge ${badge[0]}` }, badge[1]),
    el(
      'div',
      { class: 'row-main' },
      title !== null && el('div', { class: 'row-title' }, title),
      el('div', { class: 'meta' }, ...facts),
      ...below,
    ),
    after,
  );
}

/** @type {PagedList<AccessEvent>} */
const accessList = new PagedList({
  path: '/staff/access-events',
  name: 'access',
  key: (e) => e.eventId,
  order: (a, b) => desc(a.at, b.at) || (a.eventId < b.eventId ? 1 : a.eventId > b.eventId ? -1 : 0),
  params: () => {
    /** @type {Record<string, string>} */
    const p = {};
    const door = /** @type {HTMLSelectElement} */ ($('filter-door')).value;
    const allowed = /** @type {HTMLSelectElement} */ ($('filter-allowed')).value;
    if (door !== '') p.door = door;
    if (allowed !== '') p.allowed = allowed;
    return p;
  },
  render: (e) =>
    listRow({
      tone: e.allowed ? 'ok' : 'bad',
      badge: [e.allowed ? 'ok' : 'bad', e.allowed ? 'ALLOWED' : 'DENIED'],
      data: { eventId: e.eventId },
      title: decisionWords(e.code),
      facts: [
        ...whereAndWhen(e),
        e.personId !== null && fact('Person', e.personId),
        e.credentialType !== null && fact('Credential', e.credentialType),
        e.by != null && fact('By', e.by.name),
        e.by != null && fact('Reason', e.by.reason),
        el('code', { class: 'code' }, e.code),
      ],
    }),
});

/** @type {PagedList<Alarm>} */
const alarmsList = new PagedList({
  path: '/staff/alarms',
  name: 'alarms',
  key: (a) => a.alarmId,
  // open first, then each newest first (the API's order)
  order: (a, b) => (a.status === b.status ? 0 : a.status === 'open' ? -1 : 1) || desc(a.at, b.at) || (a.alarmId < b.alarmId ? 1 : -1),
  render: (a) => {
    const open = a.status === 'open';
    const ack = open ? el('button', { class: 'ack big', data: { alarmId: a.alarmId } }, 'Acknowledge') : null;
    ack?.addEventListener('click', () => void acknowledge(a));
    return listRow({
      tone: open ? 'bad' : 'done',
      badge: [open ? 'bad' : 'muted', open ? 'OPEN' : 'CLOSED'],
      data: { alarmId: a.alarmId },
      title: alarmWords(a.kind),
      facts: [
        ...whereAndWhen(a),
        !open && fact('Acknowledged', `${fmtTime(a.closedAt)}${a.closedBy ? ` by ${a.closedBy}` : ''}`),
        el('code', { class: 'code' }, a.kind),
      ],
      after: ack,
    });
  },
});

/** @type {PagedList<FailedRow>} */
const failedList = new PagedList({
  path: '/staff/inbox/failed',
  name: 'failed',
  key: (r) => r.jti,
  order: (a, b) => desc(a.failedAt, b.failedAt),
  render: (r) =>
    listRow({
      tone: 'bad',
      badge: ['bad', r.code ?? 'FAILED'],
      title: `${r.type}${r.keyId !== null ? ` for key ${r.keyId} v${r.keyVersion ?? '?'}` : ''}`,
      facts: [
        fact('Failed', fmtTime(r.failedAt)),
        fact('Received', fmtTime(r.receivedAt)),
        fact('Seq', r.seq === null ? '–' : String(r.seq)),
        fact('Attempts', String(r.attempts)),
        fact('Correlation id', r.cid),
      ],
      below: [r.lastError !== null && el('div', { class: 'detail' }, r.lastError)],
    }),
});

/**
 * A message something refused (a rejected downlink, a lock refusal): the
 * warn row both lists show, with its code, when, topic, size and detail;
 * `title` goes above the facts, `extra` below the detail.
 * @param {{ code: string, at: number, topic: string, bytes: number, detail: string }} r
 * @param {string | null} title
 * @param {HTMLElement | null} extra
 */
function refusedMessageRow(r, title, extra) {
  return listRow({
    tone: 'warn',
    badge: ['warn', r.code],
    title,
    facts: [fact('When', fmtTime(r.at)), fact('Topic', r.topic), fact('Bytes', String(r.bytes))],
    below: [el('div', { class: 'detail' }, r.detail), extra],
  });
}

/** @type {PagedList<Rejected>} */
const rejectedList = new PagedList({
  path: '/staff/rejected',
  name: 'rejected',
  key: (r) => String(r.id),
  order: (a, b) => desc(a.at, b.at) || desc(a.id, b.id),
  render: (r) => refusedMessageRow(r, null, claimedFacts(r)),
});

/**
 * What a rejected message said about itself. It did not verify, so these are
 * claims anyone could have written: labelled unverified, shown as text, and
 * only to help find the cloud's side of it (outbox row by message id, logs by
 * correlation id). Null when the message claimed nothing readable.
 * @param {Rejected} r
 */
function claimedFacts(r) {
  const claims = /** @type {[string, string | number | null][]} */ ([
    ['Message id', r.claimedJti],
    ['Correlation id', r.claimedCid],
    ['Type', r.claimedType],
    ['Seq', r.claimedSeq],
    ['Issuer', r.claimedIssuer],
  ]).filter(([, v]) => v !== null);
  if (claims.length === 0) return null;
  return el(
    'div',
    { class: 'meta claimed', title: 'Read from the message without verifying it: anyone could have written these values.' },
    el('span', { class: 'meta-item meta-label' }, 'Claimed (unverified):'),
    ...claims.map(([label, v]) => fact(label, String(v))),
  );
}

/** @type {PagedList<Refusal>} */
const refusalsList = new PagedList({
  path: '/staff/lock-refusals',
  name: 'refusals',
  key: (r) => String(r.id),
  order: (a, b) => desc(a.at, b.at) || desc(a.id, b.id),
  render: (r) =>
    refusedMessageRow(
      r,
      r.origin === 'lock'
        ? `Lock ${r.lockId ?? '?'} refused a gateway command`
        : `Gateway refused a ${r.channel} message from lock ${r.lockId ?? '(bad topic)'}`,
      null,
    ),
});

/**
 * @typedef {{ keyId: string, version: number, status: 'active' | 'revoked', validity: 'not_yet_valid' | 'valid' | 'expired',
 *   personId: string, credentialType: string, doors: string[], validFrom: number, validUntil: number,
 *   schedule: { timeZone: string, windows: { days: number[], start: string, end: string }[] } | null, offlineCapable: boolean }} SiteKey
 */

const DAY_NAMES = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];

/** @type {PagedList<SiteKey>} */
const keysList = new PagedList({
  path: '/staff/keys',
  name: 'keys',
  key: (k) => k.keyId,
  order: (a, b) => (a.keyId < b.keyId ? -1 : a.keyId > b.keyId ? 1 : 0),
  params: () => {
    /** @type {Record<string, string>} */
    const p = {};
    const q = /** @type {HTMLInputElement} */ ($('keys-search')).value.trim();
    if (q !== '') p.q = q;
    return p;
  },
  render: (k) => {
    const usable = k.status === 'active' && k.validity === 'valid';
    const badge = k.status === 'revoked' ? 'REVOKED' : k.validity === 'valid' ? 'VALID' : k.validity === 'expired' ? 'EXPIRED' : 'NOT YET';
    const schedule =
      k.schedule === null
        ? 'any time'
        : k.schedule.windows.map((w) => `${w.days.map((d) => DAY_NAMES[d] ?? String(d)).join(' ')} ${w.start}–${w.end}`).join(', ');
    return listRow({
      tone: usable ? 'ok' : 'closed',
      badge: [usable ? 'ok' : 'off', badge],
      data: { keyId: k.keyId },
      title: k.personId,
      facts: [
        fact('Doors', k.doors.join(', ')),
        fact('Valid', `${fmtTime(k.validFrom)} – ${fmtTime(k.validUntil)}`),
        fact('Schedule', schedule),
        fact('Credential', k.credentialType),
        k.offlineCapable && fact('Staff master key', 'works offline'),
        fact('Key', `${k.keyId} v${k.version}`),
      ],
    });
  },
});

const TAB_LISTS = /** @type {Record<string, PagedList<any>[]>} */ ({
  access: [accessList],
  alarms: [alarmsList],
  problems: [failedList, rejectedList, refusalsList],
  keys: [keysList],
});

// ---------------------------------------------------------------- rendering

/** @param {Status} s */
function drawStatus(s) {
  setText($('gateway-id'), s.gatewayId);
  drawTimeZone();
  setText($('count-alarms'), s.openAlarms > 0 ? String(s.openAlarms) : '');
  const problems = s.inboxFailed + s.rejectedDownlinks + s.lockRefusals;
  setText($('count-problems'), problems > 0 ? String(problems) : '');
  setText($('count-failed'), `(${s.inboxFailed})`);
  setText($('count-rejected'), `(${s.rejectedDownlinks})`);
  setText($('count-refusals'), `(${s.lockRefusals})`);
  setText($('fact-cloud'), s.cloudConnected ? 'connected' : 'NOT connected');
  $('fact-cloud').className = s.cloudConnected ? 'good' : 'bad';
  setText($('fact-site'), s.siteConnected ? 'connected' : 'NOT connected');
  $('fact-site').className = s.siteConnected ? 'good' : 'bad';
  setText(
    $('fact-sync'),
    s.newestVerifiedIatMs > 0 ? `${fmtTime(s.newestVerifiedIatMs)} (${fmtDuration((s.now - s.newestVerifiedIatMs) / 1000)} ago)` : 'never',
  );
  setText($('fact-locks'), `${s.locksOnline} of ${s.locksTotal}`);
  $('fact-locks').className = s.locksOnline < s.locksTotal ? 'bad' : 'good';

  const lockdown = s.mode === 'lockdown';
  setText($('mode-now'), lockdown ? 'LOCKDOWN' : 'normal');
  setText(
    $('mode-explain'),
    lockdown
      ? 'Lockdown: every door refuses ordinary keys (SITE_LOCKDOWN); only staff master keys open doors. End it when the situation is over.'
      : 'Normal: doors open for every valid key. Lockdown makes every door refuse ordinary keys at once; only staff master keys still open doors.',
  );
  drawModeOrigin(s);
  const sw = $('mode-switch');
  setText(sw, lockdown ? 'End lockdown (back to normal)' : 'Start lockdown');
  sw.className = `big ${lockdown ? 'primary' : 'danger'}`;
  sw.dataset.target = lockdown ? 'normal' : 'lockdown';
  drawBanner();
}

/** Where the mode came from and the passage doors (absent from an older gateway: nothing shown). @param {Status} s */
function drawModeOrigin(s) {
  const o = /** @type {{ origin?: 'gateway' | 'cloud', by?: string | null, at?: number | null } | undefined} */ (
    /** @type {Record<string, unknown>} */ (s).modeOrigin
  );
  const w = MODE_ORIGIN_WORDS;
  const origin =
    o === undefined || o.origin === undefined
      ? ''
      : o.at == null
        ? w.never
        : `${o.origin === 'cloud' ? w.cloud : w.gateway}${o.by ? ` ${w.by} ${o.by}` : ''}, ${fmtTime(o.at)}`;
  const passage = /** @type {{ doorId: string, origin: 'gateway' | 'cloud', setBy: string, held: boolean }[] | undefined} */ (
    /** @type {Record<string, unknown>} */ (s).passage
  );
  const doors = (passage ?? []).map(
    (p) => `${p.doorId}: ${p.held ? w.held : w.notHeld} (${p.origin === 'cloud' ? w.cloud : w.gateway} ${w.by} ${p.setBy})`,
  );
  setText($('mode-origin'), [origin, doors.length > 0 ? `${w.passage}: ${doors.join('; ')}` : ''].filter((x) => x !== '').join(' — '));
}

/** The banner: never green unless the latest answer from the gateway says so and is fresh. */
function drawBanner() {
  const s = state.status;
  const banner = $('banner');
  const warnings = [];
  let cls = 'unknown';
  let title = 'Status not known yet';
  let detail = '';
  if (state.failingSince !== null) {
    cls = 'unknown';
    title = 'STATUS UNKNOWN: the gateway is not answering';
    detail = `No answer since ${fmtTime(state.failingSince)}. What is shown below is from ${fmtTime(state.lastOkAt)} and may be out of date. Check the gateway's power and network.`;
  } else if (s !== null) {
    const reason =
      s.failClosedReason !== null && Object.prototype.hasOwnProperty.call(FAIL_CLOSED_WORDS, s.failClosedReason)
        ? FAIL_CLOSED_WORDS[/** @type {keyof typeof FAIL_CLOSED_WORDS} */ (s.failClosedReason)]
        : null;
    if (s.failClosed) {
      cls = 'failing';
      title = `FAILING CLOSED: ${reason?.title ?? s.failClosedReason ?? 'not in sync with the cloud'}`;
      detail = `${reason?.detail ?? 'Ordinary keys are refused until the gateway is back in sync with the cloud.'}${s.mode === 'lockdown' ? ' The site is also in lockdown.' : ''}`;
    } else if (s.storage?.low === true) {
      // Absent from an older gateway: treated as not low.
      cls = 'failing';
      title = 'FAILING CLOSED: the gateway is almost out of disk space';
      detail =
        'It cannot promise to record who opens a door, so it refuses ordinary keys (STORAGE_FULL); staff master keys still open. Free space on the gateway or call support; doors work again by themselves once there is room.';
    } else if (s.mode === 'lockdown') {
      cls = 'lockdown';
      title = 'LOCKDOWN: only staff master keys open doors';
      detail = 'Every door refuses ordinary keys. End the lockdown on the Lockdown screen when the situation is over.';
    } else {
      cls = 'normal';
      title = 'Doors operating normally';
      detail = 'The gateway is in sync with the cloud; valid keys open their doors.';
    }
    if (s.failClosedReason !== null) warnings.push(`Reason code: ${s.failClosedReason}`);
    if (s.inboxFailed > 0) warnings.push(`${s.inboxFailed} cloud message(s) failed to apply: see Problems.`);
    if (s.waitingOnGap) warnings.push('Waiting for missing messages from the cloud (a resend has been asked for).');
    if (s.openAlarms > 0) warnings.push(`${s.openAlarms} open alarm(s): see Alarms.`);
    if (s.storage?.low === true)
      warnings.push(
        `Disk almost full (DISK_LOW): ${Math.floor((s.storage.freeBytes ?? 0) / 2 ** 20)} MiB free, ${Math.floor(s.storage.minFreeBytes / 2 ** 20)} MiB needed.`,
      );
  }
  banner.className = `banner ${cls}`;
  banner.dataset.state = cls;
  setText($('banner-title'), title);
  setText($('banner-detail'), detail);
  $('banner-warnings').replaceChildren(...warnings.map((w) => el('div', null, w)));
  drawTicking();
}

/** Parts that change every second: the lease countdown and the age of the data. */
function drawTicking() {
  const s = state.status;
  if (s !== null) {
    const elapsed = (performance.now() - state.statusAtMono) / 1000;
    const remaining = s.leaseExpiresAt === null ? null : Math.max(0, s.leaseRemainingSeconds - elapsed);
    const lease = $('fact-lease');
    if (state.failingSince !== null) {
      setText(lease, 'unknown (gateway not answering)');
      lease.className = 'bad';
    } else if (remaining === null) {
      setText(lease, 'none');
      lease.className = 'bad';
    } else if (remaining <= 0) {
      setText(lease, `expired (at ${fmtTime(s.leaseExpiresAt)})`);
      lease.className = 'bad';
    } else {
      setText(lease, `${fmtDuration(remaining)} left`);
      lease.className = remaining < 60 ? 'warn' : 'good';
    }
  }
  const upd = $('last-updated');
  if (state.lastOkAt === 0) setText(upd, 'Not updated yet');
  else setText(upd, `Updated ${fmtTime(state.lastOkAt)} (${fmtDuration((Date.now() - state.lastOkAt) / 1000)} ago)`);
  upd.className = `updated${state.failingSince !== null ? ' bad' : ''}`;
}

/** @param {Lock[]} locks */
function drawLocks(locks) {
  const cards = locks.map((l) => {
    const battery = l.state.battery;
    return el(
      'article',
      { class: `lock card ${l.online ? '' : 'offline'}`, data: { lockId: l.lockId } },
      el(
        'header',
        { class: 'lock-head' },
        el('h3', null, l.doorId ?? l.lockId),
        el('span', { class: `badge ${l.online ? 'ok' : 'bad'}` }, l.online ? 'ONLINE' : 'OFFLINE'),
      ),
      el(
        'dl',
        { class: 'lock-facts' },
        el('div', null, el('dt', null, 'Lock'), el('dd', null, l.lockId)),
        el(
          'div',
          null,
          el('dt', null, 'Bolt'),
          el('dd', { class: l.state.bolt === 'jammed' ? 'bad' : '' }, l.state.bolt ?? 'not reported'),
        ),
        el('div', null, el('dt', null, 'Door'), el('dd', null, l.state.door ?? 'not reported')),
        el(
          'div',
          null,
          el('dt', null, 'Battery'),
          el('dd', { class: battery !== null && battery < 20 ? 'bad' : '' }, battery === null ? 'not reported' : `${battery}%`),
        ),
        el('div', null, el('dt', null, 'Last report'), el('dd', null, fmtTime(l.state.at))),
        l.lockout.lockedOut &&
          el(
            'div',
            null,
            el('dt', null, 'Wrong tries'),
            el('dd', { class: 'bad' }, `cooling down until ${fmtTime(l.lockout.lockedOutUntil)}`),
          ),
        l.openAlarms > 0 && el('div', null, el('dt', null, 'Open alarms'), el('dd', { class: 'bad' }, String(l.openAlarms))),
      ),
      unlockButton(l),
    );
  });
  $('locks-list').replaceChildren(...cards);
  $('locks-empty').hidden = locks.length > 0;

  // the door filter of Recent access offers the doors the gateway knows
  const select = /** @type {HTMLSelectElement} */ ($('filter-door'));
  const doors = [...new Set(locks.map((l) => l.doorId).filter((d) => d !== null))].sort();
  const have = [...select.options].slice(1).map((o) => o.value);
  if (doors.join('\n') !== have.join('\n')) {
    const chosen = select.value;
    select.replaceChildren(el('option', null, 'All doors'), ...doors.map((d) => el('option', null, /** @type {string} */ (d))));
    /** @type {HTMLOptionElement} */ (select.options[0]).value = '';
    select.value = doors.includes(chosen) ? chosen : '';
  }
}

/**
 * The remote unlock button of a lock card: supervisors only (the gateway checks the role again).
 * @param {Lock} l
 * @returns {HTMLElement | null}
 */
function unlockButton(l) {
  if (state.me?.account.role !== 'supervisor') return null;
  const b = el('button', { class: 'unlock', data: { unlock: l.lockId } }, 'Unlock once…');
  b.addEventListener('click', () => unlockOnce(l));
  return b;
}

/** Why a remote unlock was refused, in plain words (the codes of POST /staff/locks/:lockId/unlock). */
export const UNLOCK_REFUSED_WORDS = Object.freeze({
  NOT_SUPERVISOR: 'Only a supervisor can open a door remotely.',
  REASON_REQUIRED: 'Please give a reason.',
  LOCK_NOT_FOUND: 'This gateway does not know that lock.',
  LOCK_OFFLINE: 'The lock is offline: the command could not reach it. Nothing was sent.',
  SITE_LOCKDOWN: 'The site is in lockdown. End the lockdown first to open a door.',
});

/** @param {Lock} l */
function unlockOnce(l) {
  const failing = state.status?.failClosed === true;
  confirmDialog({
    title: `Unlock ${l.doorId ?? l.lockId} once?`,
    text:
      'The door opens for one entry, as a valid key would. Your name and the reason are recorded in the audit.' +
      (failing
        ? ' WARNING: the gateway is failing closed (not in sync with the cloud). Remote unlock still works, but make sure the person may enter.'
        : ''),
    inputLabel: 'Reason (required, recorded)',
    required: true,
    ok: 'Unlock now',
    act: async (reason) => {
      try {
        /** @type {{ warning: string | null }} */
        const r = await api(`/staff/locks/${encodeURIComponent(l.lockId)}/unlock`, { method: 'POST', body: { reason } });
        setText(
          $('locks-result'),
          `Unlock sent to ${l.doorId ?? l.lockId} at ${fmtTime(Date.now())}.` +
            (r.warning === 'FAILING_CLOSED' ? ' The site is failing closed: this was recorded with a warning.' : ''),
        );
        void refresh();
        return null;
      } catch (e) {
        if (e instanceof ApiError && Object.prototype.hasOwnProperty.call(UNLOCK_REFUSED_WORDS, e.code))
          return `${UNLOCK_REFUSED_WORDS[/** @type {keyof typeof UNLOCK_REFUSED_WORDS} */ (e.code)]} (${e.code})`;
        return write(async () => {
          throw e;
        });
      }
    },
  });
}

// ---------------------------------------------------------------- screens

/** @param {'loading' | 'signin' | 'setup' | 'unconfigured' | 'app'} name */
function show(name) {
  for (const s of ['loading', 'signin', 'setup', 'unconfigured', 'app']) $(`screen-${s}`).hidden = s !== name;
}

/** Forgets who is signed in and every value shown, stops refreshing. @param {string} message */
function toSignIn(message) {
  state.me = null;
  stopRefreshing();
  clearData();
  setText($('signin-message'), message);
  show('signin');
  /** @type {HTMLInputElement} */ ($('signin-username')).focus();
}

function clearData() {
  state.status = null;
  state.lastOkAt = 0;
  state.failingSince = null;
  $('locks-list').replaceChildren();
  for (const lists of Object.values(TAB_LISTS)) for (const l of lists) l.reset();
  setText($('gateway-id'), '');
  useTimeZone(null);
  setText($('time-zone'), '');
  setText($('mode-result'), '');
  setText($('alarms-result'), '');
  setText($('staff-result'), '');
  setText($('locks-result'), '');
  setText($('whoami'), '');
  $('staff-list').replaceChildren();
  $('conn-error').hidden = true;
  drawBanner();
}

/**
 * Handles an error of any staff call: 401 signs out, 429 (too many wrong
 * tokens from this address) signs out and says to wait, 503 not configured
 * shows how to configure; anything else is for the caller.
 * @param {unknown} e
 * @returns {boolean} true when handled
 */
function handleAuthError(e) {
  if (!(e instanceof ApiError)) return false;
  if (e.status === 401 || (e.status === 403 && e.code === 'CSRF_TOKEN_INVALID')) {
    toSignIn('Your session has ended (signed out, timed out, or the account was changed). Sign in again.');
    return true;
  }
  if (e.status === 503 && e.code === 'STAFF_AUTH_NOT_CONFIGURED') {
    state.me = null;
    stopRefreshing();
    clearData();
    show('unconfigured');
    return true;
  }
  return false;
}

/** @param {string} tab */
function selectTab(tab) {
  state.tab = tab;
  for (const b of document.querySelectorAll('[data-tab]')) {
    const on = /** @type {HTMLElement} */ (b).dataset.tab === tab;
    b.setAttribute('aria-selected', on ? 'true' : 'false');
    b.classList.toggle('active', on);
  }
  for (const s of document.querySelectorAll('.tab')) /** @type {HTMLElement} */ (s).hidden = s.id !== `tab-${tab}`;
  if (location.hash !== `#${tab}`) history.replaceState(null, '', `#${tab}`);
  void refresh();
}

// ---------------------------------------------------------------- refresh loop

/**
 * One refresh: the status, the locks and the lists of the open screen. Overlapping calls share one run.
 * @returns {Promise<void>}
 */
function refresh() {
  if (!state.running) return Promise.resolve();
  // a refresh asked for while one runs (a new tab, a filter, a write) runs once more after it, with
  // what is asked then; at most one waits, so a gateway that hangs does not pile refreshes up
  if (state.inFlight !== null) {
    state.queued ??= state.inFlight.then(() => {
      state.queued = null;
      return refresh();
    });
    return state.queued;
  }
  state.inFlight = (async () => {
    try {
      const [status, locks] = await Promise.all([api('/staff/status'), api('/staff/locks')]);
      // the zone first, so the lists below are drawn in it; lists drawn before in another zone are drawn again
      if (useTimeZone(/** @type {Status} */ (status).timeZone))
        for (const lists of Object.values(TAB_LISTS)) for (const l of lists) l.draw();
      await Promise.all([...(TAB_LISTS[state.tab] ?? []).map((l) => l.refresh()), state.tab === 'staff' ? refreshAccounts() : null]);
      if (!state.running) return;
      state.status = /** @type {Status} */ (status);
      state.statusAtMono = performance.now();
      state.lastOkAt = Date.now();
      state.failingSince = null;
      $('conn-error').hidden = true;
      document.body.classList.remove('stale');
      drawStatus(state.status);
      drawLocks(/** @type {{ items: Lock[] }} */ (locks).items);
    } catch (e) {
      if (handleAuthError(e) || !state.running) return;
      state.failingSince ??= Date.now();
      state.failCode = e instanceof ApiError ? e.code : 'ERROR';
      const box = $('conn-error');
      setText(
        box,
        `The gateway is not answering (${state.failCode}) since ${fmtTime(state.failingSince)}. ` +
          (state.lastOkAt > 0
            ? `Everything below was last updated ${fmtTime(state.lastOkAt)} and may be out of date.`
            : 'Nothing could be loaded.') +
          ' Retrying every few seconds.',
      );
      box.hidden = false;
      document.body.classList.add('stale');
      drawBanner();
    } finally {
      state.inFlight = null;
    }
  })();
  return state.inFlight;
}

function startRefreshing() {
  state.running = true;
  stopTimers();
  if (!document.hidden) {
    state.timer = window.setInterval(() => void refresh(), REFRESH_MS);
    state.ticker = window.setInterval(drawTicking, 1000);
  }
}

function stopTimers() {
  window.clearInterval(state.timer);
  window.clearInterval(state.ticker);
  state.timer = undefined;
  state.ticker = undefined;
}

function stopRefreshing() {
  state.running = false;
  stopTimers();
}

// ---------------------------------------------------------------- actions

/**
 * Asks for confirmation (and a text) in the dialog.
 * @param {{ title: string, text: string, inputLabel: string, required: boolean, ok: string, act: (input: string) => Promise<string | null> }} o
 *   `act` returns an error to show in the dialog, or null to close it.
 */
function confirmDialog(o) {
  const dialog = /** @type {HTMLDialogElement} */ ($('confirm'));
  const input = /** @type {HTMLInputElement} */ ($('confirm-input'));
  setText($('confirm-title'), o.title);
  setText($('confirm-text'), o.text);
  setText($('confirm-input-label'), o.inputLabel);
  setText($('confirm-ok'), o.ok);
  setText($('confirm-error'), '');
  input.value = '';
  input.required = o.required;
  input.oninput = () => setText($('confirm-error'), '');
  const form = /** @type {HTMLFormElement} */ ($('confirm-form'));
  form.onsubmit = (ev) => {
    ev.preventDefault();
    const value = input.value.trim();
    if (o.required && value === '') {
      setText($('confirm-error'), 'Please give a reason.');
      return;
    }
    const ok = /** @type {HTMLButtonElement} */ ($('confirm-ok'));
    ok.disabled = true;
    void o
      .act(value)
      .then((err) => {
        if (err === null) dialog.close();
        else setText($('confirm-error'), err);
      })
      .finally(() => {
        ok.disabled = false;
      });
  };
  $('confirm-cancel').onclick = () => dialog.close();
  dialog.showModal();
  input.focus();
}

/**
 * Runs a staff write; returns an error text for the dialog, or null.
 * @param {() => Promise<void>} f
 * @returns {Promise<string | null>}
 */
async function write(f) {
  try {
    await f();
    return null;
  } catch (e) {
    if (handleAuthError(e)) {
      /** @type {HTMLDialogElement} */ ($('confirm')).close();
      return null;
    }
    return e instanceof ApiError
      ? e.status === 0
        ? 'The gateway is not answering; nothing was changed. Try again.'
        : `The gateway refused: ${e.code}`
      : String(e);
  }
}

function switchMode() {
  const target = $('mode-switch').dataset.target === 'normal' ? 'normal' : 'lockdown';
  const toLockdown = target === 'lockdown';
  confirmDialog({
    title: toLockdown ? 'Start lockdown?' : 'End lockdown?',
    text: toLockdown
      ? 'Every door will refuse ordinary keys at once. Only staff master keys will open doors until the lockdown is ended.'
      : 'Doors will open again for every valid key.',
    inputLabel: 'Reason (recorded in the gateway log)',
    required: true,
    ok: toLockdown ? 'Start lockdown' : 'End lockdown',
    act: (reason) =>
      write(async () => {
        /** @type {{ status: string, mode: string }} */
        const r = await api('/staff/mode', { method: 'POST', body: { mode: target, reason } });
        const what = r.mode === 'lockdown' ? 'Lockdown' : 'Normal mode';
        setText(
          $('mode-result'),
          r.status === 'applied' ? `${what} is on (changed at ${fmtTime(Date.now())}).` : `${what} was already on; nothing changed.`,
        );
        await refresh();
      }),
  });
}

/** @param {Alarm} a */
function acknowledge(a) {
  confirmDialog({
    title: `Acknowledge: ${alarmWords(a.kind)}?`,
    text: `${a.doorId ?? a.lockId}, ${fmtTime(a.at)}. The alarm is closed on this gateway.`,
    inputLabel: 'Note (optional)',
    required: false,
    ok: 'Acknowledge',
    act: (note) =>
      write(async () => {
        /** @type {{ status: string }} */
        const r = await api(`/staff/alarms/${encodeURIComponent(a.alarmId)}/ack`, { method: 'POST', body: note === '' ? {} : { note } });
        setText(
          $('alarms-result'),
          r.status === 'applied'
            ? `Acknowledged: ${alarmWords(a.kind)} at ${a.doorId ?? a.lockId}.`
            : 'That alarm was already acknowledged.',
        );
        await refresh();
      }),
  });
}

/**
 * Signs in with the username and password typed, or shows why not.
 * @param {string} username
 * @param {string} password
 */
async function signIn(username, password) {
  setText($('signin-message'), '');
  try {
    state.me = await api('/staff/session', { method: 'POST', body: { username, password } });
  } catch (e) {
    setText($('signin-message'), signInError(e));
    return;
  }
  enterApp();
}

/**
 * @param {unknown} e
 * @returns {string}
 */
function signInError(e) {
  if (!(e instanceof ApiError)) return String(e);
  if (e.status === 0) return 'The gateway is not answering. Try again.';
  if (e.code === 'BAD_CREDENTIALS') return 'Wrong username or password.';
  if (e.code === 'ACCOUNT_DISABLED') return 'This account is disabled. Ask a supervisor.';
  if (e.code === 'SIGN_IN_THROTTLED')
    return `Too many wrong tries from this computer. Wait ${e.body?.retryAfterSeconds ?? 'a few'} seconds, then try again.`;
  if (e.code === 'SETUP_CODE_INVALID') return 'That setup code is not valid (or it expired: restart the gateway for a new one).';
  if (e.code === 'SETUP_ALREADY_DONE') return 'Staff access is already set up. Sign in instead.';
  if (e.code === 'WEAK_PASSWORD') return `The password is too weak: ${e.detail ?? 'at least 12 characters'}.`;
  if (e.code === 'BAD_REQUEST') return `Please check the fields: ${e.detail ?? ''}`;
  return `Sign-in failed: ${e.code}`;
}

async function setUpFirst() {
  /** @param {string} id */
  const v = (id) => /** @type {HTMLInputElement} */ ($(id)).value;
  setText($('setup-message'), '');
  try {
    state.me = await api('/staff/setup', {
      method: 'POST',
      body: { code: v('setup-code'), username: v('setup-username'), displayName: v('setup-display'), password: v('setup-password') },
    });
  } catch (e) {
    setText($('setup-message'), signInError(e));
    return;
  }
  /** @type {HTMLFormElement} */ ($('setup-form')).reset();
  enterApp();
}

async function signOut() {
  try {
    await api('/staff/session', { method: 'DELETE' });
  } catch {
    // the session is forgotten here either way; the gateway ends it at its timeout
  }
  toSignIn('Signed out.');
}

// ---------------------------------------------------------------- staff accounts (supervisors)

async function refreshAccounts() {
  if (state.me?.account.role !== 'supervisor') return;
  /** @type {{ items: Account[] }} */
  const r = await api('/staff/accounts');
  $('staff-list').replaceChildren(...r.items.map(accountRow));
}

/** @param {Account} a */
function accountRow(a) {
  const self = a.accountId === state.me?.account.accountId;
  const toggle = el(
    'button',
    { class: a.disabled ? '' : 'danger', data: { act: a.disabled ? 'enable' : 'disable' } },
    a.disabled ? 'Enable' : 'Disable',
  );
  toggle.addEventListener('click', () => changeAccount(a, a.disabled ? 'enable' : 'disable'));
  const reset = el('button', { data: { act: 'password' } }, 'Reset password');
  reset.addEventListener('click', () => resetPassword(a));
  return listRow({
    tone: a.disabled ? 'closed' : 'ok',
    badge: a.disabled ? ['off', 'Disabled'] : a.role === 'supervisor' ? ['sup', 'Supervisor'] : ['staff', 'Staff'],
    data: { account: a.username },
    title: `${a.displayName}${self ? ' (you)' : ''}`,
    facts: [fact('Username', a.username), fact('Created', fmtTime(a.createdAt)), fact('By', a.createdBy)],
    after: el('div', { class: 'row-actions' }, toggle, reset),
  });
}

/**
 * @param {Account} a
 * @param {'enable' | 'disable'} verb
 */
function changeAccount(a, verb) {
  confirmDialog({
    title: verb === 'disable' ? `Disable ${a.displayName}?` : `Enable ${a.displayName}?`,
    text: verb === 'disable' ? 'They are signed out at once and cannot sign in until enabled again.' : 'They can sign in again.',
    inputLabel: 'Note (optional)',
    required: false,
    ok: verb === 'disable' ? 'Disable' : 'Enable',
    act: () =>
      write(async () => {
        /** @type {{ status: string }} */
        const r = await api(`/staff/accounts/${encodeURIComponent(a.accountId)}/${verb}`, { method: 'POST' });
        setText(
          $('staff-result'),
          r.status === 'applied' ? `${a.displayName}: ${verb === 'disable' ? 'disabled' : 'enabled'}.` : 'Nothing changed.',
        );
        await refresh();
      }),
  });
}

/** @param {Account} a */
function resetPassword(a) {
  confirmDialog({
    title: `New password for ${a.displayName}`,
    text: 'Their open sessions end. Tell them the new password in person.',
    inputLabel: 'New password (at least 12 characters)',
    required: true,
    ok: 'Set password',
    act: (password) =>
      write(async () => {
        await api(`/staff/accounts/${encodeURIComponent(a.accountId)}/password`, { method: 'POST', body: { password } });
        setText($('staff-result'), `${a.displayName}: password set.`);
      }),
  });
}

async function createAccount() {
  /** @param {string} id */
  const v = (id) => /** @type {HTMLInputElement} */ ($(id)).value;
  setText($('staff-create-message'), '');
  try {
    /** @type {{ account: Account }} */
    const r = await api('/staff/accounts', {
      method: 'POST',
      body: { username: v('new-username'), displayName: v('new-display'), role: v('new-role'), password: v('new-password') },
    });
    /** @type {HTMLFormElement} */ ($('staff-create')).reset();
    setText($('staff-result'), `Account created: ${r.account.displayName} (${r.account.username}).`);
    await refresh();
  } catch (e) {
    if (handleAuthError(e)) return;
    setText(
      $('staff-create-message'),
      e instanceof ApiError && e.code === 'USERNAME_TAKEN'
        ? 'That username is taken.'
        : signInError(e).replace('Sign-in failed', 'Refused'),
    );
  }
}

function enterApp() {
  const me = state.me?.account;
  setText($('whoami'), me === undefined ? '' : `${me.displayName} · ${me.role === 'supervisor' ? 'Supervisor' : 'Staff'}`);
  $('tabbtn-staff').hidden = me?.role !== 'supervisor';
  if (state.tab === 'staff' && me?.role !== 'supervisor') state.tab = 'locks';
  show('app');
  startRefreshing();
  selectTab(state.tab);
}

/** At load: a token from this tab's session is tried; without one, ask the gateway whether staff access is configured at all. */
async function boot() {
  const fromHash = location.hash.slice(1);
  if (['locks', 'access', 'alarms', 'problems', 'keys', 'lockdown', 'staff'].includes(fromHash)) state.tab = fromHash;
  let searchTimer = 0;
  $('keys-search').addEventListener('input', () => {
    window.clearTimeout(searchTimer);
    searchTimer = window.setTimeout(() => {
      keysList.reset();
      void refresh();
    }, 250);
  });
  $('keys-filters').addEventListener('submit', (ev) => ev.preventDefault());

  $('signin-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const user = /** @type {HTMLInputElement} */ ($('signin-username'));
    const pw = /** @type {HTMLInputElement} */ ($('signin-password'));
    const username = user.value.trim();
    const password = pw.value;
    pw.value = '';
    if (username === '' || password === '') return;
    void signIn(username, password);
  });
  $('setup-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    void setUpFirst();
  });
  $('staff-create').addEventListener('submit', (ev) => {
    ev.preventDefault();
    void createAccount();
  });
  $('signout').addEventListener('click', () => void signOut());
  $('refresh').addEventListener('click', () => void refresh());
  $('unconfigured-retry').addEventListener('click', () => void probe());
  $('mode-switch').addEventListener('click', switchMode);
  for (const b of document.querySelectorAll('[data-tab]'))
    b.addEventListener('click', () => selectTab(/** @type {HTMLElement} */ (b).dataset.tab ?? 'locks'));
  for (const id of ['filter-door', 'filter-allowed']) {
    $(id).addEventListener('change', () => {
      accessList.reset();
      void refresh();
    });
  }
  for (const l of [accessList, alarmsList, failedList, rejectedList, refusalsList, keysList]) {
    $(`${l.o.name}-more`).addEventListener('click', () => {
      l.more().catch((e) => {
        if (!handleAuthError(e)) void refresh();
      });
    });
  }
  document.addEventListener('visibilitychange', () => {
    if (!state.running) return;
    if (document.hidden) stopTimers();
    else {
      startRefreshing();
      void refresh();
    }
  });
}

/** At load: an open session (the cookie) enters at once; without one, the setup form while no account exists, else sign-in. */
async function probe() {
  try {
    /** @type {{ account: Me, csrfToken: string | null }} */
    const r = await api('/staff/session');
    state.me = { account: r.account, csrfToken: r.csrfToken ?? '' };
    enterApp();
    return;
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 401)) {
      if (!handleAuthError(e)) {
        setText($('signin-message'), 'The gateway is not answering. Reload the page to try again.');
        show('signin');
      }
      return;
    }
  }
  try {
    /** @type {{ required: boolean }} */
    const setup = await api('/staff/setup');
    if (setup.required) {
      show('setup');
      /** @type {HTMLInputElement} */ ($('setup-code')).focus();
      return;
    }
  } catch (e) {
    if (handleAuthError(e)) return;
  }
  setText($('signin-message'), '');
  show('signin');
  /** @type {HTMLInputElement} */ ($('signin-username')).focus();
}

if (typeof document !== 'undefined') {
  void boot().then(probe);
}
