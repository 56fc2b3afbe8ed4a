import { startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { chromium, type Browser, type BrowserContext, type BrowserContextOptions, type Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, beforeEach, expect } from 'vitest';
import { runSite, type Running } from './harness.js';

/** The accounts every browser test's gateway has (made through the setup code and a supervisor). */
export const SUPERVISOR = { username: 'aiko', displayName: 'Aiko Tanaka', password: 'supervisor password 1' } as const;
export const STAFF = { username: 'ken', displayName: 'Ken Sato', password: 'front desk password 2' } as const;

/** The first supervisor through the gateway's one-time setup code, then a staff member she creates. */
export async function makeAccounts(s: Running): Promise<void> {
  const code = s.gw.setupCode;
  if (code === null) throw new Error('no setup code: the gateway has accounts already');
  const sup = await s.gw.accounts.setup({ code: code.code, ...SUPERVISOR }, '127.0.0.1', 'test-setup');
  if (sup.status !== 'applied') throw new Error(`setup refused: ${sup.code}`);
  const { accountId, username, displayName, role } = sup.account;
  const made = await s.gw.accounts.create(
    { accountId, username, displayName, role, via: 'session' },
    { ...STAFF, role: 'staff' },
    'test-setup',
  );
  if (made.status !== 'applied') throw new Error(`account refused: ${made.code}`);
}

/** Headers of a state-changing request by the supervisor, signed in over real HTTP (session cookie and CSRF token). */
export async function supervisorWrite(s: Running): Promise<Record<string, string>> {
  const r = await fetch(`${s.gw.httpUrl!}/staff/session`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: SUPERVISOR.username, password: SUPERVISOR.password }),
  });
  if (r.status !== 200) throw new Error(`supervisor sign-in answered ${r.status}`);
  const { csrfToken } = (await r.json()) as { csrfToken: string };
  return { cookie: (r.headers.get('set-cookie') ?? '').split(';')[0]!, 'x-csrf-token': csrfToken };
}

/** Debian's Chromium, never a downloaded build. */
export const CHROMIUM = process.env.TOBIRA_CHROMIUM ?? '/usr/bin/chromium';

/**
 * One browser per file, and per test a fresh embedded broker, gateway and
 * browser context, all closed after the test. A script error or a
 * Content-Security-Policy violation in a page fails the test that caused it.
 * Call inside a describe block: it registers the hooks.
 */
export function browserSuite() {
  let browser: Browser;
  let broker: MqttTestBroker;
  let site: Running | undefined;
  let context: BrowserContext | undefined;
  let pageErrors: string[] = [];

  beforeAll(async () => {
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  });
  afterAll(async () => {
    await browser?.close();
  });
  beforeEach(async () => {
    broker = await startMqttBackend('aedes');
    pageErrors = [];
  });
  afterEach(async () => {
    await context?.close();
    context = undefined;
    await site?.close();
    site = undefined;
    await broker.stop();
    expect(pageErrors).toEqual([]);
  });

  return {
    get broker(): MqttTestBroker {
      return broker;
    },
    /** A gateway on this test's broker (closed after the test), with the two accounts unless `accounts: false`. */
    async start(opts: Parameters<typeof runSite>[3] & { accounts?: boolean } = {}): Promise<Running> {
      const { accounts, ...rest } = opts;
      site = await runSite(broker.url, broker.url, broker.unique, rest);
      if (accounts !== false) await makeAccounts(site);
      return site;
    },
    /** A page on the gateway's `/`, in a fresh context (closed after the test). */
    async open(s: Running, viewport = { width: 1024, height: 900 }, options: BrowserContextOptions = {}): Promise<Page> {
      context = await browser.newContext({ viewport, ...options });
      // below the test timeout, so a wait that fails names its locator
      context.setDefaultTimeout(15_000);
      const page = await context.newPage();
      page.on('pageerror', (e) => pageErrors.push(String(e)));
      // the page must need nothing its own Content-Security-Policy forbids
      page.on('console', (m) => {
        if (/Content Security Policy/i.test(m.text())) pageErrors.push(m.text());
      });
      await page.goto(`${s.gw.httpUrl!}/`);
      return page;
    },
    async signIn(page: Page, who: { username: string; password: string } = SUPERVISOR): Promise<void> {
      await page.locator('#signin-username').fill(who.username);
      await page.locator('#signin-password').fill(who.password);
      await page.locator('#signin-form button[type=submit]').click();
    },
  };
}
