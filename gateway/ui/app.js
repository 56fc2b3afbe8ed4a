// @ts-check
import { MESSAGES as MESSAGES_BY_LANG } from './messages.js';
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

/** The decision codes, alarm kinds and fail-closed reasons the catalogue has words for (shared/src/codes.ts, shared AlarmKind, app/staff-status.ts). */
export { MESSAGES, LANGUAGES } from './messages.js';

/** @typedef {'en' | 'ja'} Lang */

/** The language shown: the choice saved in this browser, else the browser's preferred one we have, else English. */
/** @type {Lang} */
let lang = 'en';

const LANG_STORAGE_KEY = 'tobira.staff.lang';

/**
 * The first of the browser's preferred languages that the page has (`ja-JP` is `ja`), else English.
 * @param {readonly string[]} preferred
 * @returns {Lang}
 */
export function pickLanguage(preferred) {
  for (const p of preferred) {
    const base = p.toLowerCase().split('-')[0];
    if (base === 'ja' || base === 'en') return base;
  }
  return 'en';
}

/**
 * The words of a catalogue key in the language shown, placeholders `{name}` filled from `params`.
 * A key no catalogue has is shown as it is (the i18n test makes that a failure).
 * @param {string} key
 * @param {Record<string, string | number>} [params]
 * @returns {string}
 */
export function t(key, params) {
  /** @type {Record<string, string>} */
  const cat = MESSAGES_BY_LANG[lang];
  const text = Object.prototype.hasOwnProperty.call(cat, key) ? /** @type {string} */ (cat[key]) : key;
  if (params === undefined) return text;
  return text.replace(/\{(\w+)\}/g, (m, name) => (Object.prototype.hasOwnProperty.call(params, name) ? String(params[name]) : m));
}

/**
 * True when the catalogue has the key (codes from the gateway are looked up with it).
 * @param {string} key
 */
function has(key) {
  return Object.prototype.hasOwnProperty.call(MESSAGES_BY_LANG[lang], key);
}

/** @param {Lang} l */
export function setLanguageForTest(l) {
  lang = l;
}

/**
 * Plain words for a decision code; an unknown code is shown as it is.
 * @param {string} code
 * @returns {string}
 */
export function decisionWords(code) {
  return has(`decision.${code}`) ? t(`decision.${code}`) : t('decision.unknown', { code });
}

/**
 * @param {string} kind
 * @returns {string}
 */
export function alarmWords(kind) {
  return has(`alarm.${kind}`) ? t(`alarm.${kind}`) : kind;
}

/**
 * A code the gateway answered with, in words, the code after them; an unknown code as it is.
 * @param {string} code
 * @returns {string}
 */
export function codeWords(code) {
  return has(`code.${code}`) ? t('code.withCode', { words: t(`code.${code}`), code }) : t('code.unknown', { code });
}

const REFRESH_MS = 5000;
/** While the live feed is connected, a full refresh still runs this often (a safety net: a lost notice cannot leave the page stale for long). */
const LIVE_SAFETY_MS = 30_000;
/** After the gateway refused a stream (over its limit), the page polls and tries the stream again after this long. */
const LIVE_RETRY_MS = 30_000;
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
  const locale = dateLocale();
  if (tz !== undefined) {
    try {
      return { format: new Intl.DateTimeFormat(locale, { ...o, timeZone: tz }), site: true };
    } catch {
      // a zone this browser's time zone data does not have: the header says the device's zone is used
    }
  }
  return { format: new Intl.DateTimeFormat(locale, o), site: false };
}

/**
 * The locale dates are written in: the browser's own when it is a variant of the language shown
 * (en-GB writes 15 Jan), else the language shown.
 * @returns {string}
 */
function dateLocale() {
  const browser = typeof navigator === 'undefined' ? [] : navigator.languages;
  return browser.find((l) => l.toLowerCase().split('-')[0] === lang) ?? lang;
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
  if (dateFormat.site) setText(e, t('tz.site', { zone: shown }));
  else if (timeZone !== undefined) setText(e, t('tz.deviceUnknownSite', { zone: shown, site: timeZone }));
  else setText(e, t('tz.deviceNoSite', { zone: shown }));
}

/**
 * Date and time, in the site's zone when the API names one, else the browser's.
 * @param {number | null | undefined} ms
 * @returns {string}
 */
function fmtTime(ms) {
  if (ms === null || ms === undefined || ms <= 0) return t('time.never');
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
  if (d > 0) return t('dur.dh', { d, h });
  if (h > 0) return t('dur.hm', { h, m });
  if (m > 0) return t('dur.ms', { m, s: r });
  return t('dur.s', { s: r });
}

// ---------------------------------------------------------------- state

/**
 * @typedef {{ gatewayId: string, now: number, mode: 'normal' | 'lockdown', cloudConnected: boolean, siteConnected: boolean,
 *   appliedSeq: number, leaseExpiresAt: number | null, leaseRemainingSeconds: number, failClosed: boolean,
 *   failClosedReason: string | null, waitingOnGap: boolean, newestVerifiedIatMs: number, lastResyncAt: number | null,
 *   inboxDepth: number, outboxDepth: number, inboxFailed: number, rejectedDownlinks: number, lockRefusals: number,
 *   openAlarms: number, locksTotal: number, locksOnline: number, timeZone?: string | null,
 *   storage?: { low: boolean, freeBytes: number | null, minFreeBytes: number },
 *   clockSkew?: { skewMs: number, since: number } | null }} Status
 */

/**
 * @typedef {{ accountId: string | null, username: string, displayName: string, role: 'staff' | 'supervisor' }} Me
 * @typedef {{ accountId: string, username: string, displayName: string, role: 'staff' | 'supervisor', disabled: boolean,
 *   disabledAt: number | null, createdAt: number, createdBy: string, totp?: boolean }} Account
 * @typedef {{ secret: string, uri: string, qr: { size: number, rows: string[] } }} Enrolment
 */

const state = {
  /** The signed-in person and the session's CSRF token (memory only). @type {{ account: Me, csrfToken: string } | null} */
  me: null,
  /** @type {Status | null} */
  status: null,
  /** The locks last drawn (drawn again when the language changes). @type {Lock[] | null} */
  locks: null,
  /** The staff accounts last drawn. @type {Account[] | null} */
  accounts: null,
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
 *   personName?: string | null, doorName?: string | null,
 *   by?: { accountId: string, name: string, reason: string } | null }} AccessEvent
 * @typedef {{ alarmId: string, lockId: string, doorId: string | null, kind: string, status: 'open' | 'closed', at: number,
 *   receivedAt: number, closedAt: number | null, closedBy: string | null, count?: number, firstSeenAt?: number,
 *   lastSeenAt?: number, endedAt?: number | null }} Alarm
 * @typedef {{ jti: string, type: string, seq: number | null, keyId: string | null, keyVersion: number | null, attempts: number,
 *   code: string | null, lastError: string | null, receivedAt: number, failedAt: number, cid: string }} FailedRow
 * @typedef {{ id: number, at: number, topic: string, code: string, detail: string, bytes: number,
 *   claimedJti: string | null, claimedCid: string | null, claimedType: string | null, claimedSeq: number | null,
 *   claimedIssuer: string | null }} Rejected
 * @typedef {{ id: number, at: number, origin: 'gateway' | 'lock', lockId: string | null, channel: string, topic: string,
 *   code: string, detail: string, bytes: number }} Refusal
 * @typedef {{ lockId: string, doorId: string | null, doorName?: string | null, online: boolean,
 *   state: { bolt: string | null, door: string | null, battery: number | null, at: number | null },
 *   lockout: { failures: number, lockedOutUntil: number | null, lockedOut: boolean }, openAlarms: number, updatedAt: number }} Lock
 */

/**
 * One labelled fact; with `id`, the value is a display name and the id shows on hover.
 * @param {string} label
 * @param {string} value
 * @param {string | null} [id]
 */
const fact = (label, value, id = null) =>
  el(
    'span',
    id !== null && id !== value ? { class: 'meta-item', title: t('fact.idTitle', { id }), data: { id } } : { class: 'meta-item' },
    el('span', { class: 'meta-label' }, `${label} `),
    value,
  );

/**
 * A door's display name: the one the event carries, else the one its lock card has, else its id.
 * @param {string | null} doorId
 * @param {string | null | undefined} [name]
 * @returns {string}
 */
function doorName(doorId, name) {
  if (doorId === null) return '–';
  if (typeof name === 'string') return name;
  return state.locks?.find((l) => l.doorId === doorId)?.doorName ?? doorId;
}

/**
 * When and at which door and lock something happened: the first facts of an access event and of an alarm.
 * @param {{ at: number, doorId: string | null, lockId: string, doorName?: string | null }} x
 */
const whereAndWhen = (x) => [
  fact(t('fact.when'), fmtTime(x.at)),
  fact(t('fact.door'), doorName(x.doorId, x.doorName), x.doorId),
  fact(t('fact.lock'), x.lockId),
];

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
      badge: [e.allowed ? 'ok' : 'bad', t(e.allowed ? 'access.allowed' : 'access.denied')],
      data: { eventId: e.eventId },
      title: decisionWords(e.code),
      facts: [
        ...whereAndWhen(e),
        e.personId !== null && fact(t('fact.person'), e.personName ?? e.personId, e.personId),
        e.credentialType !== null && fact(t('fact.credential'), e.credentialType),
        e.by != null && fact(t('fact.by'), e.by.name),
        e.by != null && fact(t('fact.reason'), e.by.reason),
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
    const ack = open ? el('button', { class: 'ack big', data: { alarmId: a.alarmId } }, t('alarms.ack')) : null;
    ack?.addEventListener('click', () => void acknowledge(a));
    return listRow({
      tone: open ? 'bad' : 'done',
      badge: [open ? 'bad' : 'muted', t(open ? 'alarms.open' : 'alarms.closed')],
      data: { alarmId: a.alarmId },
      title: alarmWords(a.kind),
      facts: [
        ...whereAndWhen(a),
        // repeats are counted on the open alarm, not listed one by one
        (a.count ?? 1) > 1 &&
          fact(t('alarms.repeats'), t('alarms.repeatsValue', { count: String(a.count), time: fmtTime(a.lastSeenAt ?? a.receivedAt) })),
        a.endedAt != null && fact(t('alarms.ended'), fmtTime(a.endedAt)),
        !open &&
          fact(
            t('alarms.acknowledged'),
            a.closedBy ? t('alarms.ackedBy', { time: fmtTime(a.closedAt), by: a.closedBy }) : fmtTime(a.closedAt),
          ),
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
      badge: ['bad', r.code ?? t('problems.failedBadge')],
      title:
        r.keyId !== null
          ? t('problems.failedTitleKey', { type: r.type, key: r.keyId, version: r.keyVersion ?? '?' })
          : t('problems.failedTitle', { type: r.type }),
      facts: [
        fact(t('problems.failedAt'), fmtTime(r.failedAt)),
        fact(t('problems.received'), fmtTime(r.receivedAt)),
        fact(t('problems.seq'), r.seq === null ? '–' : String(r.seq)),
        fact(t('problems.attempts'), String(r.attempts)),
        fact(t('problems.cid'), r.cid),
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
    facts: [fact(t('fact.when'), fmtTime(r.at)), fact(t('problems.topic'), r.topic), fact(t('problems.bytes'), String(r.bytes))],
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
    [t('problems.messageId'), r.claimedJti],
    [t('problems.cid'), r.claimedCid],
    [t('problems.type'), r.claimedType],
    [t('problems.seq'), r.claimedSeq],
    [t('problems.issuer'), r.claimedIssuer],
  ]).filter(([, v]) => v !== null);
  if (claims.length === 0) return null;
  return el(
    'div',
    { class: 'meta claimed', title: t('problems.claimedTitle') },
    el('span', { class: 'meta-item meta-label' }, t('problems.claimed')),
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
        ? t('problems.lockRefused', { lock: r.lockId ?? '?' })
        : t('problems.gatewayRefused', { channel: r.channel, lock: r.lockId ?? t('problems.badTopic') }),
      null,
    ),
});

/**
 * @typedef {{ keyId: string, version: number, status: 'active' | 'revoked', validity: 'not_yet_valid' | 'valid' | 'expired',
 *   personId: string, personName: string | null, credentialType: string, doors: string[],
 *   doorNames: Record<string, string>, validFrom: number, validUntil: number,
 *   schedule: { timeZone: string, windows: { days: number[], start: string, end: string }[] } | null, offlineCapable: boolean }} SiteKey
 */

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
    const badge = t(
      k.status === 'revoked'
        ? 'keys.revoked'
        : k.validity === 'valid'
          ? 'keys.valid'
          : k.validity === 'expired'
            ? 'keys.expired'
            : 'keys.notYet',
    );
    const schedule =
      k.schedule === null
        ? t('keys.anyTime')
        : k.schedule.windows
            .map((w) => t('keys.window', { days: w.days.map((d) => t(`day.${d}`)).join(' '), start: w.start, end: w.end }))
            .join(', ');
    return listRow({
      tone: usable ? 'ok' : 'closed',
      badge: [usable ? 'ok' : 'off', badge],
      data: { keyId: k.keyId },
      title: k.personName ?? k.personId,
      facts: [
        fact(t('keys.doors'), k.doors.map((d) => k.doorNames[d] ?? d).join(', '), k.doors.join(', ')),
        k.personName !== null && fact(t('fact.person'), k.personId),
        fact(t('keys.validRange'), t('keys.range', { from: fmtTime(k.validFrom), until: fmtTime(k.validUntil) })),
        fact(t('keys.schedule'), schedule),
        fact(t('fact.credential'), k.credentialType),
        k.offlineCapable && fact(t('keys.master'), t('keys.masterOffline')),
        fact(t('keys.key'), t('keys.keyVersion', { key: k.keyId, version: k.version })),
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
  setText($('count-failed'), t('problems.count', { n: s.inboxFailed }));
  setText($('count-rejected'), t('problems.count', { n: s.rejectedDownlinks }));
  setText($('count-refusals'), t('problems.count', { n: s.lockRefusals }));
  setText($('fact-cloud'), t(s.cloudConnected ? 'facts.connected' : 'facts.notConnected'));
  $('fact-cloud').className = s.cloudConnected ? 'good' : 'bad';
  setText($('fact-site'), t(s.siteConnected ? 'facts.connected' : 'facts.notConnected'));
  $('fact-site').className = s.siteConnected ? 'good' : 'bad';
  setText(
    $('fact-sync'),
    s.newestVerifiedIatMs > 0
      ? t('facts.syncAgo', { time: fmtTime(s.newestVerifiedIatMs), ago: fmtDuration((s.now - s.newestVerifiedIatMs) / 1000) })
      : t('time.never'),
  );
  setText($('fact-locks'), t('facts.locksOf', { online: s.locksOnline, total: s.locksTotal }));
  $('fact-locks').className = s.locksOnline < s.locksTotal ? 'bad' : 'good';

  const lockdown = s.mode === 'lockdown';
  setText($('mode-now'), t(lockdown ? 'lockdown.on' : 'lockdown.normal'));
  setText($('mode-explain'), t(lockdown ? 'lockdown.explainOn' : 'lockdown.explainOff'));
  drawModeOrigin(s);
  const sw = $('mode-switch');
  setText(sw, t(lockdown ? 'lockdown.end' : 'lockdown.start'));
  sw.className = `big ${lockdown ? 'primary' : 'danger'}`;
  sw.dataset.target = lockdown ? 'normal' : 'lockdown';
  drawBanner();
}

/** Where the mode came from and the passage doors (absent from an older gateway: nothing shown). @param {Status} s */
function drawModeOrigin(s) {
  const o = /** @type {{ origin?: 'gateway' | 'cloud', by?: string | null, at?: number | null } | undefined} */ (
    /** @type {Record<string, unknown>} */ (s).modeOrigin
  );
  const w = {
    gateway: t('modeOrigin.gateway'),
    cloud: t('modeOrigin.cloud'),
    by: t('modeOrigin.by'),
    never: t('modeOrigin.never'),
    passage: t('modeOrigin.passage'),
    held: t('modeOrigin.held'),
    notHeld: t('modeOrigin.notHeld'),
  };
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
  let title = t('banner.notKnown');
  let detail = '';
  if (state.failingSince !== null) {
    cls = 'unknown';
    title = t('banner.unknownTitle');
    detail = t('banner.unknownDetail', { since: fmtTime(state.failingSince), at: fmtTime(state.lastOkAt) });
  } else if (s !== null) {
    const known = s.failClosedReason !== null && has(`failClosed.${s.failClosedReason}.title`);
    if (s.failClosed) {
      cls = 'failing';
      title = t('banner.failingTitle', {
        reason: known ? t(`failClosed.${s.failClosedReason}.title`) : (s.failClosedReason ?? t('banner.failingFallback')),
      });
      detail =
        (known ? t(`failClosed.${s.failClosedReason}.detail`) : t('banner.failingDetailFallback')) +
        (s.mode === 'lockdown' ? t('banner.alsoLockdown') : '');
    } else if (s.storage?.low === true) {
      // Absent from an older gateway: treated as not low.
      cls = 'failing';
      title = t('banner.diskTitle');
      detail = t('banner.diskDetail');
    } else if (s.mode === 'lockdown') {
      cls = 'lockdown';
      title = t('banner.lockdownTitle');
      detail = t('banner.lockdownDetail');
    } else {
      cls = 'normal';
      title = t('banner.normalTitle');
      detail = t('banner.normalDetail');
    }
    if (s.failClosedReason !== null) warnings.push(t('banner.warnReason', { code: s.failClosedReason }));
    if (s.inboxFailed > 0) warnings.push(t('banner.warnFailed', { n: s.inboxFailed }));
    if (s.waitingOnGap) warnings.push(t('banner.warnGap'));
    if (s.openAlarms > 0) warnings.push(t('banner.warnAlarms', { n: s.openAlarms }));
    if (s.clockSkew != null)
      warnings.push(
        t(s.clockSkew.skewMs > 0 ? 'banner.warnClockAhead' : 'banner.warnClockBehind', {
          seconds: Math.round(Math.abs(s.clockSkew.skewMs) / 1000),
        }),
      );
    if (s.storage?.low === true)
      warnings.push(
        t('banner.warnDisk', {
          free: Math.floor((s.storage.freeBytes ?? 0) / 2 ** 20),
          min: Math.floor(s.storage.minFreeBytes / 2 ** 20),
        }),
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
      setText(lease, t('lease.unknown'));
      lease.className = 'bad';
    } else if (remaining === null) {
      setText(lease, t('lease.none'));
      lease.className = 'bad';
    } else if (remaining <= 0) {
      setText(lease, t('lease.expired', { time: fmtTime(s.leaseExpiresAt) }));
      lease.className = 'bad';
    } else {
      setText(lease, t('lease.left', { left: fmtDuration(remaining) }));
      lease.className = remaining < 60 ? 'warn' : 'good';
    }
  }
  const upd = $('last-updated');
  if (state.lastOkAt === 0) setText(upd, t('updated.never'));
  else setText(upd, t('updated.at', { time: fmtTime(state.lastOkAt), ago: fmtDuration((Date.now() - state.lastOkAt) / 1000) }));
  upd.className = `updated${state.failingSince !== null ? ' bad' : ''}`;
}

/**
 * What a lock card is called: its door's name, else the door id, else the lock id.
 * @param {Lock} l
 */
function lockTitle(l) {
  return l.doorName ?? l.doorId ?? l.lockId;
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
        el('h3', l.doorId !== null && l.doorName != null ? { title: t('fact.idTitle', { id: l.doorId }) } : null, lockTitle(l)),
        el('span', { class: `badge ${l.online ? 'ok' : 'bad'}` }, t(l.online ? 'locks.online' : 'locks.offline')),
      ),
      el(
        'dl',
        { class: 'lock-facts' },
        el('div', null, el('dt', null, t('locks.lock')), el('dd', null, l.lockId)),
        el(
          'div',
          null,
          el('dt', null, t('locks.bolt')),
          el('dd', { class: l.state.bolt === 'jammed' ? 'bad' : '', data: { bolt: l.state.bolt ?? '' } }, stateWords('bolt', l.state.bolt)),
        ),
        el(
          'div',
          null,
          el('dt', null, t('locks.door')),
          el('dd', { data: { door: l.state.door ?? '' } }, stateWords('door', l.state.door)),
        ),
        el(
          'div',
          null,
          el('dt', null, t('locks.battery')),
          el(
            'dd',
            { class: battery !== null && battery < 20 ? 'bad' : '' },
            battery === null ? t('locks.notReported') : t('locks.batteryPct', { n: battery }),
          ),
        ),
        el('div', null, el('dt', null, t('locks.lastReport')), el('dd', null, fmtTime(l.state.at))),
        l.lockout.lockedOut &&
          el(
            'div',
            null,
            el('dt', null, t('locks.wrongTries')),
            el('dd', { class: 'bad' }, t('locks.coolingUntil', { time: fmtTime(l.lockout.lockedOutUntil) })),
          ),
        l.openAlarms > 0 && el('div', null, el('dt', null, t('locks.openAlarms')), el('dd', { class: 'bad' }, String(l.openAlarms))),
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
    select.replaceChildren(
      el('option', { data: { i18n: 'access.allDoors' } }, t('access.allDoors')),
      ...doors.map((d) => {
        const o = /** @type {HTMLOptionElement} */ (el('option', null, doorName(d)));
        o.value = /** @type {string} */ (d);
        return o;
      }),
    );
    /** @type {HTMLOptionElement} */ (select.options[0]).value = '';
    select.value = doors.includes(chosen) ? chosen : '';
  }
}

/**
 * A bolt or door state the lock reported, in words; one the catalogue does not know as it is.
 * @param {'bolt' | 'door'} kind
 * @param {string | null} value
 */
function stateWords(kind, value) {
  if (value === null) return t('locks.notReported');
  return has(`${kind}.${value}`) ? t(`${kind}.${value}`) : value;
}

/**
 * The remote unlock button of a lock card: supervisors only (the gateway checks the role again).
 * @param {Lock} l
 * @returns {HTMLElement | null}
 */
function unlockButton(l) {
  if (state.me?.account.role !== 'supervisor') return null;
  const b = el('button', { class: 'unlock', data: { unlock: l.lockId } }, t('locks.unlockButton'));
  b.addEventListener('click', () => unlockOnce(l));
  return b;
}

/** @param {Lock} l */
function unlockOnce(l) {
  const failing = state.status?.failClosed === true;
  confirmDialog({
    title: t('unlock.title', { door: lockTitle(l) }),
    text: t('unlock.text') + (failing ? t('unlock.failingWarning') : ''),
    inputLabel: t('unlock.reason'),
    required: true,
    ok: t('unlock.ok'),
    act: async (reason) => {
      try {
        /** @type {{ warning: string | null }} */
        const r = await api(`/staff/locks/${encodeURIComponent(l.lockId)}/unlock`, { method: 'POST', body: { reason } });
        setText(
          $('locks-result'),
          t('unlock.sent', { door: lockTitle(l), time: fmtTime(Date.now()) }) +
            (r.warning === 'FAILING_CLOSED' ? t('unlock.sentFailing') : ''),
        );
        void refresh();
        return null;
      } catch (e) {
        return write(async () => {
          throw e;
        });
      }
    },
  });
}

// ---------------------------------------------------------------- screens

/** @param {'loading' | 'signin' | 'totp' | 'recovery' | 'setup' | 'unconfigured' | 'app'} name */
function show(name) {
  for (const s of ['loading', 'signin', 'totp', 'recovery', 'setup', 'unconfigured', 'app']) $(`screen-${s}`).hidden = s !== name;
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
  state.locks = null;
  state.accounts = null;
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
    toSignIn(t('signin.sessionEnded'));
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
      state.locks = /** @type {{ items: Lock[] }} */ (locks).items;
      drawLocks(state.locks);
    } catch (e) {
      if (handleAuthError(e) || !state.running) return;
      state.failingSince ??= Date.now();
      state.failCode = e instanceof ApiError ? e.code : 'ERROR';
      const box = $('conn-error');
      setText(
        box,
        t('conn.error', { code: state.failCode, since: fmtTime(state.failingSince) }) +
          (state.lastOkAt > 0 ? t('conn.lastUpdated', { at: fmtTime(state.lastOkAt) }) : t('conn.nothing')) +
          t('conn.retrying'),
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
    state.timer = window.setInterval(() => {
      // polling is the fallback: with the live feed connected, only the safety-net refresh runs
      if (live.state === 'live' && Date.now() - state.lastOkAt < LIVE_SAFETY_MS) return;
      void refresh();
    }, REFRESH_MS);
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
  stopLive();
}

// ---------------------------------------------------------------- live feed (server-sent events)

/**
 * The live feed: GET /staff/events, authenticated by the session cookie. A
 * notice (access, lock, alarm, status) makes the page fetch what changed,
 * soon and once for a burst. Every (re)connect fetches everything (what
 * happened while disconnected is then shown). The browser reconnects by
 * itself after a drop (the gateway asks for 2 s); a refused stream (over the
 * gateway's limit, or the session gone) is closed for good by the browser:
 * the page polls and tries again later.
 */
const live = {
  /** @type {EventSource | null} */
  source: null,
  /** @type {'off' | 'connecting' | 'live' | 'polling'} */
  state: 'off',
  /** @type {number | undefined} */
  soon: undefined,
  /** @type {number | undefined} */
  retry: undefined,
  /** Notices received (the page shows it for tests and support as data-events). */
  events: 0,
};

/** @param {'off' | 'connecting' | 'live' | 'polling'} st */
function setLive(st) {
  live.state = st;
  drawLive();
}

function drawLive() {
  const e = $('live');
  e.dataset.state = live.state;
  e.dataset.events = String(live.events);
  e.hidden = live.state === 'off';
  setText(e, live.state === 'off' ? '' : t(`live.${live.state}`));
}

function startLive() {
  stopLive();
  if (typeof EventSource === 'undefined') {
    setLive('polling');
    return;
  }
  const es = new EventSource('/staff/events');
  live.source = es;
  setLive('connecting');
  es.onopen = () => {
    setLive('live');
    // what happened while the stream was down is fetched now
    void refresh();
  };
  es.onerror = () => {
    if (live.source !== es) return;
    if (es.readyState === EventSource.CLOSED) {
      // refused (429 over the limit, 401 signed out): poll; the next poll notices a 401 and signs out
      live.source = null;
      setLive('polling');
      window.clearTimeout(live.retry);
      live.retry = window.setTimeout(() => {
        if (state.running) startLive();
      }, LIVE_RETRY_MS);
    } else setLive('connecting');
  };
  for (const type of ['access', 'lock', 'alarm', 'status', 'resync'])
    es.addEventListener(type, () => {
      live.events++;
      refreshSoon();
    });
}

/** One refresh for a burst of notices (a door opening sends a decision, then a state). */
function refreshSoon() {
  if (live.soon !== undefined) return;
  live.soon = window.setTimeout(() => {
    live.soon = undefined;
    drawLive();
    void refresh();
  }, 100);
}

function stopLive() {
  live.source?.close();
  live.source = null;
  window.clearTimeout(live.retry);
  window.clearTimeout(live.soon);
  live.soon = undefined;
  setLive('off');
}

// ---------------------------------------------------------------- actions

/**
 * Asks for confirmation (and a text) in the dialog; with `reauth`, also for the
 * signed-in person's own password, which the gateway asks before anything that
 * grants or moves lasting authority (REAUTH_REQUIRED without it).
 * @param {{ title: string, text: string, inputLabel: string | null, required: boolean, reauth?: boolean, ok: string, act: (input: string, currentPassword: string) => Promise<string | null> }} o
 *   `inputLabel` null: no text is asked. `act` returns an error to show in the dialog, or null to close it.
 */
function confirmDialog(o) {
  const dialog = /** @type {HTMLDialogElement} */ ($('confirm'));
  const input = /** @type {HTMLInputElement} */ ($('confirm-input'));
  const password = /** @type {HTMLInputElement} */ ($('confirm-password'));
  const reauth = o.reauth === true;
  setText($('confirm-title'), o.title);
  setText($('confirm-text'), o.text);
  setText($('confirm-input-label'), o.inputLabel ?? '');
  $('confirm-input-label').hidden = o.inputLabel === null;
  input.hidden = o.inputLabel === null;
  $('confirm-password-label').hidden = !reauth;
  password.hidden = !reauth;
  setText($('confirm-ok'), o.ok);
  setText($('confirm-error'), '');
  input.value = '';
  // the password never stays in the page after the dialog, whichever way it closed
  password.value = '';
  dialog.onclose = () => {
    password.value = '';
  };
  input.required = o.required;
  password.required = reauth;
  input.oninput = () => setText($('confirm-error'), '');
  password.oninput = () => setText($('confirm-error'), '');
  const form = /** @type {HTMLFormElement} */ ($('confirm-form'));
  form.onsubmit = (ev) => {
    ev.preventDefault();
    const value = input.value.trim();
    if (o.required && value === '') {
      setText($('confirm-error'), t('dialog.reasonRequired'));
      return;
    }
    if (reauth && password.value === '') {
      setText($('confirm-error'), t('dialog.passwordRequired'));
      return;
    }
    const currentPassword = password.value;
    const ok = /** @type {HTMLButtonElement} */ ($('confirm-ok'));
    ok.disabled = true;
    void o
      .act(value, currentPassword)
      .then((err) => {
        if (err === null) dialog.close();
        else {
          password.value = '';
          setText($('confirm-error'), err);
        }
      })
      .finally(() => {
        ok.disabled = false;
      });
  };
  $('confirm-cancel').onclick = () => dialog.close();
  dialog.showModal();
  (o.inputLabel === null && reauth ? password : input).focus();
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
    return e instanceof ApiError ? (e.status === 0 ? t('code.notAnsweringNothingChanged') : codeWords(e.code)) : String(e);
  }
}

function switchMode() {
  const target = $('mode-switch').dataset.target === 'normal' ? 'normal' : 'lockdown';
  const toLockdown = target === 'lockdown';
  confirmDialog({
    title: t(toLockdown ? 'lockdown.startTitle' : 'lockdown.endTitle'),
    text: t(toLockdown ? 'lockdown.startText' : 'lockdown.endText'),
    inputLabel: t('lockdown.reason'),
    required: true,
    ok: t(toLockdown ? 'lockdown.start' : 'lockdown.endOk'),
    act: (reason) =>
      write(async () => {
        /** @type {{ status: string, mode: string }} */
        const r = await api('/staff/mode', { method: 'POST', body: { mode: target, reason } });
        const on = r.mode === 'lockdown';
        setText(
          $('mode-result'),
          r.status === 'applied'
            ? t(on ? 'lockdown.appliedOn' : 'lockdown.appliedOff', { time: fmtTime(Date.now()) })
            : t(on ? 'lockdown.noopOn' : 'lockdown.noopOff'),
        );
        await refresh();
      }),
  });
}

/** @param {Alarm} a */
function acknowledge(a) {
  confirmDialog({
    title: t('alarms.ackTitle', { kind: alarmWords(a.kind) }),
    text: t('alarms.ackText', { where: a.doorId === null ? a.lockId : doorName(a.doorId), time: fmtTime(a.at) }),
    inputLabel: t('staff.note'),
    required: false,
    ok: t('alarms.ack'),
    act: (note) =>
      write(async () => {
        /** @type {{ status: string }} */
        const r = await api(`/staff/alarms/${encodeURIComponent(a.alarmId)}/ack`, { method: 'POST', body: note === '' ? {} : { note } });
        setText(
          $('alarms-result'),
          r.status === 'applied'
            ? t('alarms.ackDone', { kind: alarmWords(a.kind), where: a.doorId === null ? a.lockId : doorName(a.doorId) })
            : t('alarms.ackNoop'),
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
    // the password was right; the second step (a code, or setting up the app first) is bound to this challenge
    if (
      e instanceof ApiError &&
      (e.code === 'TOTP_REQUIRED' || e.code === 'TOTP_ENROLMENT_REQUIRED') &&
      typeof e.body?.challenge === 'string'
    ) {
      void toSecondStep(e.body.challenge, e.code === 'TOTP_ENROLMENT_REQUIRED');
      return;
    }
    setText($('signin-message'), signInError(e));
    return;
  }
  enterApp();
}

/** The challenge of a sign-in half done (memory only, never stored). @type {string | null} */
let challenge = null;

/**
 * The code step of a sign-in; with `enrol` (the site requires a second
 * factor and this supervisor has none) the app is set up first, here.
 * @param {string} ch
 * @param {boolean} enrol
 */
async function toSecondStep(ch, enrol) {
  challenge = ch;
  setText($('totp-message'), '');
  $('totp-enrol').hidden = !enrol;
  const input = /** @type {HTMLInputElement} */ ($('totp-code'));
  input.value = '';
  show('totp');
  input.focus();
  if (!enrol) return;
  try {
    /** @type {Enrolment} */
    const r = await api('/staff/session/totp/enrolment', { method: 'POST', body: { challenge: ch } });
    drawEnrolment('totp', r);
  } catch (e) {
    setText($('totp-message'), signInError(e));
  }
}

/**
 * Shows a new secret once: its QR code (drawn from its modules: the page
 * loads no image from elsewhere, data: URLs included) and the key to type.
 * @param {'totp' | 'mytotp'} prefix
 * @param {Enrolment} r
 */
function drawEnrolment(prefix, r) {
  const canvas = /** @type {HTMLCanvasElement} */ ($(`${prefix}-qr`));
  canvas.setAttribute('aria-label', t('totp.qrAlt'));
  const ctx = canvas.getContext('2d');
  if (ctx !== null) {
    // a quiet zone of 4 modules on each side, as scanners expect
    const cell = Math.floor(canvas.width / (r.qr.size + 8));
    const off = Math.floor((canvas.width - cell * r.qr.size) / 2);
    ctx.fillStyle = '#fff';
    ctx.fillRect(0, 0, canvas.width, canvas.height);
    ctx.fillStyle = '#000';
    r.qr.rows.forEach((row, y) => {
      for (let x = 0; x < row.length; x++) if (row[x] === '1') ctx.fillRect(off + x * cell, off + y * cell, cell, cell);
    });
  }
  setText($(`${prefix}-secret`), r.secret);
}

/**
 * A typed code as the API takes it: digits are a TOTP code, anything else a recovery code.
 * @param {string} typed
 * @returns {{ code: string } | { recoveryCode: string }}
 */
function secondFactorOf(typed) {
  return /^[0-9 ]+$/.test(typed) ? { code: typed } : { recoveryCode: typed };
}

async function secondStep() {
  const input = /** @type {HTMLInputElement} */ ($('totp-code'));
  const typed = input.value.trim();
  input.value = '';
  if (typed === '' || challenge === null) return;
  setText($('totp-message'), '');
  /** @type {{ account: Me, csrfToken: string, recoveryCodes?: string[] }} */
  let r;
  try {
    r = await api('/staff/session/totp', { method: 'POST', body: { challenge, ...secondFactorOf(typed) } });
  } catch (e) {
    if (e instanceof ApiError && e.code === 'TOTP_CHALLENGE_INVALID') {
      challenge = null;
      toSignIn(t('code.TOTP_CHALLENGE_INVALID'));
      return;
    }
    setText($('totp-message'), signInError(e));
    return;
  }
  challenge = null;
  clearEnrolment('totp');
  state.me = { account: r.account, csrfToken: r.csrfToken };
  if (Array.isArray(r.recoveryCodes)) showRecovery(r.recoveryCodes);
  else enterApp();
}

/** @param {'totp' | 'mytotp'} prefix */
function clearEnrolment(prefix) {
  const canvas = /** @type {HTMLCanvasElement} */ ($(`${prefix}-qr`));
  canvas.getContext('2d')?.clearRect(0, 0, canvas.width, canvas.height);
  setText($(`${prefix}-secret`), '');
}

/** The recovery codes, once, on a screen of their own. @param {string[]} codes */
function showRecovery(codes) {
  $('recovery-list').replaceChildren(...codes.map((c) => el('li', null, el('code', null, c))));
  show('recovery');
  /** @type {HTMLButtonElement} */ ($('recovery-done')).focus();
}

/**
 * @param {unknown} e
 * @returns {string}
 */
function signInError(e) {
  if (!(e instanceof ApiError)) return String(e);
  if (e.status === 0) return t('code.GATEWAY_UNREACHABLE');
  if (e.code === 'SIGN_IN_THROTTLED' && typeof e.body?.retryAfterSeconds === 'number')
    return t('code.signInThrottledWait', { seconds: e.body.retryAfterSeconds });
  // the gateway's detail is English for logs and scripts: the page shows the catalogue's words
  return has(`code.${e.code}`) ? t(`code.${e.code}`) : codeWords(e.code);
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
  toSignIn(t('signin.signedOut'));
}

// ---------------------------------------------------------------- staff accounts (supervisors)

async function refreshAccounts() {
  if (state.me?.account.role !== 'supervisor') return;
  // the own second factor's state alongside, not after: one round trip of waiting, not two
  /** @type {[{ items: Account[] }, unknown]} */
  const [r] = await Promise.all([api('/staff/accounts'), refreshMyTotp()]);
  state.accounts = r.items;
  $('staff-list').replaceChildren(...r.items.map(accountRow));
}

/** The signed-in supervisor's own second factor: on, off, or not asked on this site. */
async function refreshMyTotp() {
  /** @type {{ account: Account, totpPolicy: 'required' | 'optional' | 'off' }} */
  const r = await api('/staff/session');
  const on = r.account.totp === true;
  const policy = r.totpPolicy;
  setText(
    $('mytotp-status'),
    t(policy === 'off' && !on ? 'mytotp.policyOff' : on ? 'mytotp.on' : policy === 'required' ? 'mytotp.noneRequired' : 'mytotp.none'),
  );
  $('mytotp-start').hidden = on || policy === 'off' || !$('mytotp-enrol').hidden;
  $('mytotp-off').hidden = !on;
}

function startMyTotp() {
  setText($('mytotp-message'), '');
  confirmDialog({
    title: t('mytotp.startTitle'),
    text: t('mytotp.startText'),
    inputLabel: null,
    required: false,
    reauth: true,
    ok: t('mytotp.start'),
    act: (_, currentPassword) =>
      write(async () => {
        /** @type {Enrolment} */
        const r = await api('/staff/totp/enrolment', { method: 'POST', body: { currentPassword } });
        drawEnrolment('mytotp', r);
        $('mytotp-enrol').hidden = false;
        $('mytotp-start').hidden = true;
        // after the dialog has closed (it gives the focus back to the button that opened it)
        window.setTimeout(() => /** @type {HTMLInputElement} */ ($('mytotp-code')).focus(), 0);
      }),
  });
}

async function confirmMyTotp() {
  const input = /** @type {HTMLInputElement} */ ($('mytotp-code'));
  const code = input.value.trim();
  input.value = '';
  setText($('mytotp-message'), '');
  try {
    /** @type {{ recoveryCodes: string[] }} */
    const r = await api('/staff/totp/enrolment/confirm', { method: 'POST', body: { code } });
    $('mytotp-enrol').hidden = true;
    clearEnrolment('mytotp');
    showRecovery(r.recoveryCodes);
    await refreshMyTotp();
  } catch (e) {
    if (!handleAuthError(e)) setText($('mytotp-message'), signInError(e));
  }
}

async function turnOffMyTotp() {
  const pw = /** @type {HTMLInputElement} */ ($('mytotp-off-password'));
  const code = /** @type {HTMLInputElement} */ ($('mytotp-off-code'));
  const body = { password: pw.value, ...secondFactorOf(code.value.trim()) };
  pw.value = '';
  code.value = '';
  setText($('mytotp-message'), '');
  try {
    await api('/staff/totp/disable', { method: 'POST', body });
    setText($('mytotp-message'), t('mytotp.offDone'));
    await refresh();
  } catch (e) {
    if (!handleAuthError(e)) setText($('mytotp-message'), signInError(e));
  }
}

/** @param {Account} a */
function accountRow(a) {
  const self = a.accountId === state.me?.account.accountId;
  const toggle = el(
    'button',
    { class: a.disabled ? '' : 'danger', data: { act: a.disabled ? 'enable' : 'disable' } },
    t(a.disabled ? 'staff.enable' : 'staff.disable'),
  );
  toggle.addEventListener('click', () => changeAccount(a, a.disabled ? 'enable' : 'disable'));
  const reset = el('button', { data: { act: 'password' } }, t('staff.resetPassword'));
  reset.addEventListener('click', () => resetPassword(a));
  // another supervisor's second factor (a lost phone); one's own is turned off with password and code
  const totpReset = a.totp === true && !self ? el('button', { class: 'danger', data: { act: 'totp-reset' } }, t('staff.resetTotp')) : null;
  totpReset?.addEventListener('click', () => resetTotp(a));
  return listRow({
    tone: a.disabled ? 'closed' : 'ok',
    badge: a.disabled ? ['off', t('staff.disabled')] : a.role === 'supervisor' ? ['sup', t('role.supervisor')] : ['staff', t('role.staff')],
    data: { account: a.username },
    title: self ? t('staff.you', { name: a.displayName }) : a.displayName,
    facts: [
      fact(t('staff.username'), a.username),
      fact(t('staff.created'), fmtTime(a.createdAt)),
      // the first supervisor is made by the setup code (app/staff-accounts.ts), the others by a supervisor's name
      fact(t('staff.by'), a.createdBy === 'setup code' ? t('staff.bySetupCode') : a.createdBy),
      a.role === 'supervisor' ? fact(t('staff.totp'), t(a.totp === true ? 'staff.totpYes' : 'staff.totpNo')) : null,
    ],
    after: el('div', { class: 'row-actions' }, toggle, reset, totpReset),
  });
}

/**
 * @param {Account} a
 * @param {'enable' | 'disable'} verb
 */
function changeAccount(a, verb) {
  // enabling a supervisor gives the site's authority back: the gateway asks for the acting supervisor's password
  const reauth = verb === 'enable' && a.role === 'supervisor';
  confirmDialog({
    title: t(verb === 'disable' ? 'staff.disableTitle' : 'staff.enableTitle', { name: a.displayName }),
    text: t(verb === 'disable' ? 'staff.disableText' : 'staff.enableText'),
    inputLabel: t('staff.note'),
    required: false,
    reauth,
    ok: t(verb === 'disable' ? 'staff.disable' : 'staff.enable'),
    act: (_, currentPassword) =>
      write(async () => {
        /** @type {{ status: string }} */
        const r = await api(`/staff/accounts/${encodeURIComponent(a.accountId)}/${verb}`, {
          method: 'POST',
          ...(reauth ? { body: { currentPassword } } : {}),
        });
        setText(
          $('staff-result'),
          r.status === 'applied'
            ? t(verb === 'disable' ? 'staff.disabledDone' : 'staff.enabledDone', { name: a.displayName })
            : t('staff.nothingChanged'),
        );
        await refresh();
      }),
  });
}

/** @param {Account} a */
function resetPassword(a) {
  confirmDialog({
    title: t('staff.passwordTitle', { name: a.displayName }),
    text: t('staff.passwordText'),
    inputLabel: t('staff.newPassword'),
    required: true,
    reauth: true,
    ok: t('staff.setPassword'),
    act: (password, currentPassword) =>
      write(async () => {
        await api(`/staff/accounts/${encodeURIComponent(a.accountId)}/password`, { method: 'POST', body: { password, currentPassword } });
        setText($('staff-result'), t('staff.passwordDone', { name: a.displayName }));
      }),
  });
}

/** @param {Account} a */
function resetTotp(a) {
  confirmDialog({
    title: t('staff.totpResetTitle', { name: a.displayName }),
    text: t('staff.totpResetText'),
    inputLabel: t('staff.reason'),
    required: true,
    reauth: true,
    ok: t('staff.resetTotp'),
    act: (reason, currentPassword) =>
      write(async () => {
        await api(`/staff/accounts/${encodeURIComponent(a.accountId)}/totp/reset`, { method: 'POST', body: { reason, currentPassword } });
        setText($('staff-result'), t('staff.totpResetDone', { name: a.displayName }));
        await refresh();
      }),
  });
}

async function createAccount() {
  /** @param {string} id */
  const v = (id) => /** @type {HTMLInputElement} */ ($(id)).value;
  setText($('staff-create-message'), '');
  const body = { username: v('new-username'), displayName: v('new-display'), role: v('new-role'), password: v('new-password') };
  /** @param {{ account: Account }} r */
  const done = async (r) => {
    /** @type {HTMLFormElement} */ ($('staff-create')).reset();
    setText($('staff-result'), t('staff.createdDone', { name: r.account.displayName, username: r.account.username }));
    await refresh();
  };
  if (body.role === 'supervisor') {
    // a supervisor account is the site's authority: the gateway asks for the creator's own password too
    confirmDialog({
      title: t('staff.createSupervisorTitle', { name: body.displayName }),
      text: t('staff.createSupervisorText'),
      inputLabel: null,
      required: false,
      reauth: true,
      ok: t('staff.create'),
      act: (_, currentPassword) =>
        write(async () => done(await api('/staff/accounts', { method: 'POST', body: { ...body, currentPassword } }))),
    });
    return;
  }
  try {
    await done(await api('/staff/accounts', { method: 'POST', body }));
  } catch (e) {
    if (handleAuthError(e)) return;
    setText($('staff-create-message'), signInError(e));
  }
}

function drawWhoami() {
  const me = state.me?.account;
  setText($('whoami'), me === undefined ? '' : t('top.whoami', { name: me.displayName, role: t(`role.${me.role}`) }));
}

/**
 * Shows the page in a language: the fixed words of index.html (`data-i18n`), then everything drawn
 * from data again (times too: the date format follows the language).
 * @param {Lang} l
 * @param {boolean} remember true when the person chose it (kept in this browser); false for the default
 */
function useLanguage(l, remember) {
  lang = l;
  if (remember) {
    try {
      localStorage.setItem(LANG_STORAGE_KEY, l);
    } catch {
      // storage refused (private mode): the choice holds for this page only
    }
  }
  document.documentElement.lang = l;
  document.title = t('app.title');
  for (const e of document.querySelectorAll('[data-i18n]')) e.textContent = t(/** @type {HTMLElement} */ (e).dataset.i18n ?? '');
  for (const e of document.querySelectorAll('[data-i18n-label]'))
    e.setAttribute('aria-label', t(/** @type {HTMLElement} */ (e).dataset.i18nLabel ?? ''));
  /** @type {HTMLSelectElement} */ ($('lang')).value = l;
  dateFormat = makeFormat(timeZone);
  drawWhoami();
  if (state.status !== null) drawStatus(state.status);
  else drawBanner();
  if (state.locks !== null) drawLocks(state.locks);
  for (const lists of Object.values(TAB_LISTS)) for (const list of lists) list.draw();
  if (state.accounts !== null) $('staff-list').replaceChildren(...state.accounts.map(accountRow));
  drawLive();
}

/** The language at load: the one chosen before in this browser, else the browser's preference. @returns {Lang} */
function initialLanguage() {
  try {
    const saved = localStorage.getItem(LANG_STORAGE_KEY);
    if (saved === 'en' || saved === 'ja') return saved;
  } catch {
    // no storage: the browser's preference
  }
  return pickLanguage(navigator.languages);
}

function enterApp() {
  const me = state.me?.account;
  drawWhoami();
  $('tabbtn-staff').hidden = me?.role !== 'supervisor';
  if (state.tab === 'staff' && me?.role !== 'supervisor') state.tab = 'locks';
  show('app');
  startRefreshing();
  startLive();
  selectTab(state.tab);
}

/** At load: a token from this tab's session is tried; without one, ask the gateway whether staff access is configured at all. */
async function boot() {
  useLanguage(initialLanguage(), false);
  $('lang').addEventListener('change', (ev) => {
    const v = /** @type {HTMLSelectElement} */ (ev.target).value;
    useLanguage(v === 'ja' ? 'ja' : 'en', true);
  });
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
  $('totp-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    void secondStep();
  });
  $('totp-back').addEventListener('click', () => {
    challenge = null;
    clearEnrolment('totp');
    toSignIn('');
  });
  $('recovery-done').addEventListener('click', () => {
    $('recovery-list').replaceChildren();
    if (state.running) show('app');
    else enterApp();
  });
  $('mytotp-start').addEventListener('click', () => startMyTotp());
  $('mytotp-enrol').addEventListener('submit', (ev) => {
    ev.preventDefault();
    void confirmMyTotp();
  });
  $('mytotp-off').addEventListener('submit', (ev) => {
    ev.preventDefault();
    void turnOffMyTotp();
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
        setText($('signin-message'), t('signin.notAnsweringReload'));
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
