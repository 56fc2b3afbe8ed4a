import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { AlarmUplinkKind, DECISION_CODES } from '@tobira/shared';
import { describe, expect, it } from 'vitest';
import { FAIL_CLOSED_REASONS } from '../src/app/staff-status.js';
import { GATEWAY_HTTP_CODES } from '../src/http/app.js';

/**
 * The staff UI's two message catalogues (gateway/ui/messages.js) against the
 * page that uses them: the same keys in both, every key used, every key used
 * present, every code the gateway sends has words, and no word of the page
 * bypasses the catalogue (index.html text only under data-i18n; no English
 * sentence as a string in app.js). The page in Japanese is also read in
 * Chromium (staff-ui-browser.test.ts).
 */
const UI_DIR = new URL('../ui/', import.meta.url);
const html = readFileSync(new URL('index.html', UI_DIR), 'utf8');
const js = readFileSync(new URL('app.js', UI_DIR), 'utf8');
const { MESSAGES } = (await import(pathToFileURL(new URL('messages.js', UI_DIR).pathname).href)) as {
  MESSAGES: { en: Record<string, string>; ja: Record<string, string> };
};
const ui = (await import(pathToFileURL(new URL('app.js', UI_DIR).pathname).href)) as {
  t(key: string, params?: Record<string, string | number>): string;
  pickLanguage(preferred: readonly string[]): 'en' | 'ja';
  setLanguageForTest(l: 'en' | 'ja'): void;
  codeWords(code: string): string;
};

/** app.js without its comments (JSDoc types and explanations are not page text). */
const code = js.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');

/** Keys the page names literally: in `t(...)`, in data-i18n attributes, and `data: { i18n: ... }`. */
function literalKeys(): Set<string> {
  const keys = new Set<string>();
  // each call's arguments, to its closing parenthesis (a call nests others: fmtTime(...) and the like)
  for (const m of code.matchAll(/\bt\(/g)) {
    let depth = 1;
    let i = m.index + m[0].length;
    const from = i;
    for (; i < code.length && depth > 0; i++) depth += code[i] === '(' ? 1 : code[i] === ')' ? -1 : 0;
    for (const q of code.slice(from, i).matchAll(/'([A-Za-z0-9_]+\.[A-Za-z0-9_.]+)'/g)) keys.add(q[1]!);
  }
  for (const m of html.matchAll(/data-i18n(?:-label)?="([^"]+)"/g)) keys.add(m[1]!);
  for (const m of code.matchAll(/i18n: '([^']+)'/g)) keys.add(m[1]!);
  return keys;
}

/** Keys looked up by a code the gateway sends (`t(\`decision.${code}\`)` and the like). */
const dynamicKeys = new Set<string>([
  ...Object.keys(DECISION_CODES).map((c) => `decision.${c}`),
  ...AlarmUplinkKind.options.map((k) => `alarm.${k}`),
  ...FAIL_CLOSED_REASONS.flatMap((r) => [`failClosed.${r}.title`, `failClosed.${r}.detail`]),
  ...Object.keys(GATEWAY_HTTP_CODES).map((c) => `code.${c}`),
  // codes the page makes itself (no answer, a script error) and the live feed's cap
  'code.GATEWAY_UNREACHABLE',
  'code.ERROR',
  ...[0, 1, 2, 3, 4, 5, 6].map((d) => `day.${d}`),
  'role.staff',
  'role.supervisor',
  'live.live',
  'live.connecting',
  'live.polling',
  'bolt.locked',
  'bolt.unlocked',
  'bolt.jammed',
  'door.open',
  'door.closed',
]);

const placeholders = (s: string) => [...s.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort();

describe('the staff UI message catalogues', () => {
  it('have the same keys in Japanese and English, none empty, with the same placeholders', () => {
    expect(Object.keys(MESSAGES.ja).sort()).toEqual(Object.keys(MESSAGES.en).sort());
    for (const [k, en] of Object.entries(MESSAGES.en)) {
      const ja = MESSAGES.ja[k]!;
      expect(en.trim(), k).not.toBe('');
      expect(ja.trim(), k).not.toBe('');
      expect(placeholders(ja), k).toEqual(placeholders(en));
    }
  });

  it('has every key the page uses, in both languages', () => {
    const used = literalKeys();
    expect(used.size).toBeGreaterThan(150);
    const missing = [...used, ...dynamicKeys].filter((k) => !(k in MESSAGES.en) || !(k in MESSAGES.ja));
    expect(missing).toEqual([]);
  });

  it('has no key the page does not use', () => {
    const used = literalKeys();
    const unused = Object.keys(MESSAGES.en).filter((k) => !used.has(k) && !dynamicKeys.has(k));
    expect(unused).toEqual([]);
  });

  it('has words for every code the gateway answers with, every decision code, alarm kind and fail-closed reason', () => {
    for (const c of Object.keys(GATEWAY_HTTP_CODES)) expect(MESSAGES.ja[`code.${c}`], c).toBeDefined();
    for (const c of Object.keys(DECISION_CODES)) expect(MESSAGES.ja[`decision.${c}`], c).toBeDefined();
    for (const k of AlarmUplinkKind.options) expect(MESSAGES.ja[`alarm.${k}`], k).toBeDefined();
    for (const r of FAIL_CLOSED_REASONS) expect(MESSAGES.ja[`failClosed.${r}.title`], r).toBeDefined();
    ui.setLanguageForTest('ja');
    expect(ui.codeWords('LOCK_OFFLINE')).toBe('錠がオフラインです：コマンドが届きません。何も送信していません。（LOCK_OFFLINE）');
    expect(ui.codeWords('SOMETHING_NEW')).toBe('ゲートウェイが拒否しました：SOMETHING_NEW');
    ui.setLanguageForTest('en');
    expect(ui.codeWords('LOCK_OFFLINE')).toBe('The lock is offline: the command could not reach it. Nothing was sent. (LOCK_OFFLINE)');
  });

  it('fills placeholders, and shows a key no catalogue has as it is (never an empty string)', () => {
    ui.setLanguageForTest('ja');
    expect(ui.t('unlock.title', { door: 'Room 101' })).toBe('Room 101を1回だけ開錠しますか？');
    expect(ui.t('no.such.key')).toBe('no.such.key');
    ui.setLanguageForTest('en');
    expect(ui.t('facts.locksOf', { online: 1, total: 2 })).toBe('1 of 2');
  });

  it("defaults to the browser's first language the page has, else English", () => {
    expect(ui.pickLanguage(['ja-JP', 'en-US'])).toBe('ja');
    expect(ui.pickLanguage(['fr-FR', 'en-GB', 'ja'])).toBe('en');
    expect(ui.pickLanguage(['de'])).toBe('en');
    expect(ui.pickLanguage([])).toBe('en');
  });
});

describe('no word of the page bypasses the catalogue', () => {
  it('index.html has text only in elements marked data-i18n, and that text is the English catalogue entry', () => {
    const body = html.slice(html.indexOf('<body>')).replace(/<!--[\s\S]*?-->/g, '');
    const bypass: string[] = [];
    // each text run with a letter, and the start tag right before it
    for (const m of body.matchAll(/(<[^>]+>)([^<]*\p{L}[^<]*)</gu)) {
      const tag = m[1]!;
      const text = m[2]!.trim();
      const key = /data-i18n="([^"]+)"/.exec(tag)?.[1];
      if (key === undefined || MESSAGES.en[key] !== text) bypass.push(`${tag} ${text}`);
    }
    expect(bypass).toEqual([]);
    // attributes people read
    expect(body.match(/\s(?:placeholder|title|alt)="[^"]*\p{L}/gu) ?? []).toEqual([]);
    for (const m of body.matchAll(/aria-label="[^"]+"/g)) expect(body).toContain(`${m[0]} data-i18n-label=`);
  });

  it('app.js holds no English sentence or label of its own: its words come from t()', () => {
    const strings = [...code.matchAll(/'((?:[^'\\\n]|\\.)*)'|`((?:[^`\\]|\\.)*)`|"((?:[^"\\\n]|\\.)*)"/g)].map(
      (m) => m[1] ?? m[2] ?? m[3] ?? '',
    );
    // a capitalised word then another word, or words ending a sentence: what a label or a message looks like
    const prose = strings.filter((s) => /\b[A-Z][a-z]+ [A-Za-z]/.test(s) || /[a-z]{2,}[.?!:](\s|$)/.test(s));
    expect(prose).toEqual([]);
  });
});
