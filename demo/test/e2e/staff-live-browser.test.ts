import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { System, waitFor } from './system.js';

/**
 * The staff page's live feed in a real Chromium (Debian's) against the whole
 * system (cloud, gateway, firmware-sim locks, embedded brokers): a sim door
 * changing state and a remote unlock appear without a reload, pushed by the
 * gateway's server-sent events (the page's polling is held back while the
 * feed is live, so what appears came through the feed), and after the
 * gateway cuts the stream the page reconnects by itself.
 */
const CHROMIUM = process.env.TOBIRA_CHROMIUM ?? '/usr/bin/chromium';
const SHOTS = process.env.TOBIRA_UI_SCREENSHOT_DIR ?? fileURLToPath(new URL('../../../test-artifacts/screenshots', import.meta.url));
mkdirSync(SHOTS, { recursive: true });

describe('the staff page live, end to end (embedded brokers and database, firmware-sim locks, Chromium)', () => {
  let sys: System;
  let browser: Browser;
  let page: Page;
  const errors: string[] = [];

  beforeAll(async () => {
    sys = await new System('embedded', { gatewayOverrides: { http: { host: '127.0.0.1', port: 0 } } }).start();
    const code = sys.gateway.setupCode!;
    const r = await sys.gateway.accounts.setup(
      { code: code.code, username: 'aiko', displayName: 'Aiko Tanaka', password: 'supervisor password 1' },
      '127.0.0.1',
      'e2e-setup',
    );
    expect(r.status).toBe('applied');
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
    const context = await browser.newContext({ viewport: { width: 1024, height: 900 }, locale: 'en-US' });
    context.setDefaultTimeout(15_000);
    page = await context.newPage();
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(`${sys.gateway.httpUrl!}/`);
    await page.locator('#signin-username').fill('aiko');
    await page.locator('#signin-password').fill('supervisor password 1');
    await page.locator('#signin-form button[type=submit]').click();
    await page.locator('#live[data-state="live"]').waitFor();
  });
  afterAll(async () => {
    await browser?.close();
    await sys?.stop();
    expect(errors).toEqual([]);
  });

  const card = () => page.locator('#locks-list [data-lock-id="L1"]');
  const notices = async () => Number(await page.locator('#live').getAttribute('data-events'));

  it('shows a sim door forced open and closed again without a reload, through the feed', async () => {
    await waitFor(() => sys.gateway.store.lock('L1')?.online === true, 'L1 online at the gateway');
    await card().locator('[data-door="closed"]').waitFor();
    const before = await notices();
    const url = page.url();
    await sys.fleet.lock('L1').input({ type: 'force_open' });
    await card().locator('[data-door="open"]').waitFor();
    expect(await notices()).toBeGreaterThan(before);
    await page.locator('#count-alarms').filter({ hasText: '1' }).waitFor();
    await sys.fleet.lock('L1').input({ type: 'close_door' });
    await card().locator('[data-door="closed"]').waitFor();
    expect(page.url()).toBe(url);
    expect(await page.evaluate('performance.getEntriesByType("navigation").length')).toBe(1);
    await page.screenshot({ path: `${SHOTS}/live-locks-en.png` });
  });

  it('shows a remote unlock in the feed as it happens: the sim bolt unlocks and the decision appears', async () => {
    await page.locator('[data-tab="access"]').click();
    await page.locator('#tab-access').waitFor();
    const rows = page.locator('#access-list > li').filter({ hasText: 'Opened remotely by a supervisor' });
    expect(await rows.count()).toBe(0);
    // the unlock is made by another client (a colleague's page, here the API): this page learns of it only through the feed
    const before = await notices();
    const r = sys.gateway.accounts.list().find((a) => a.username === 'aiko')!;
    const done = await page.evaluate(async () => {
      const s = (await (await fetch('/staff/session')).json()) as { csrfToken: string };
      const res = await fetch('/staff/locks/L1/unlock', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-csrf-token': s.csrfToken },
        body: JSON.stringify({ reason: 'guest locked out, room 101' }),
      });
      return res.status;
    });
    expect(done).toBe(200);
    expect(r.displayName).toBe('Aiko Tanaka');
    await rows.filter({ hasText: 'Aiko Tanaka' }).filter({ hasText: 'guest locked out, room 101' }).waitFor();
    expect(await notices()).toBeGreaterThan(before);
    await waitFor(() => sys.fleet.lock('L1').bolt === 'unlocked', 'the sim bolt unlocked');
    await page.screenshot({ path: `${SHOTS}/live-access-en.png` });
  });

  it('reconnects by itself after the gateway cuts the stream, and is live again', async () => {
    await page.locator('[data-tab="locks"]').click();
    expect(sys.gateway.live.streamCount).toBe(1);
    sys.gateway.live.endAll();
    expect(sys.gateway.live.streamCount).toBe(0);
    await waitFor(() => sys.gateway.live.streamCount === 1, 'the page opened a new stream');
    await page.locator('#live[data-state="live"]').waitFor();
    const before = await notices();
    await sys.fleet.lock('L1').input({ type: 'force_open' });
    await card().locator('[data-door="open"]').waitFor();
    expect(await notices()).toBeGreaterThan(before);
  });
});
