import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { generateSync } from 'otplib';
import type { Page } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import type { Running } from './harness.js';
import { SUPERVISOR, browserSuite } from './ui-browser.js';

/**
 * A supervisor's TOTP second factor in a real Chromium (Debian's) against a
 * running gateway with a manual clock: enrolment from the staff screen (the
 * QR code drawn, the key shown once, the recovery codes shown once), then a
 * sign-in that asks for the code; and, under policy required, the set-up at
 * the first sign-in before any session. Codes are made with otplib at the
 * gateway's clock.
 */
/** Screenshots of each screen, kept as test artifacts (gitignored); TOBIRA_UI_SCREENSHOT_DIR puts them elsewhere. */
const SHOTS = process.env.TOBIRA_UI_SCREENSHOT_DIR ?? fileURLToPath(new URL('../../test-artifacts/screenshots', import.meta.url));
mkdirSync(SHOTS, { recursive: true });

describe('staff TOTP in Chromium against a running gateway', () => {
  const ui = browserSuite();

  const codeAt = (s: Running, secret: string) => generateSync({ secret, epoch: Math.floor(s.f.clock.now() / 1000) });
  /** Dark pixels on the QR canvas: a drawn code has many, an empty canvas none. */
  const darkPixels = (page: Page, id: string) =>
    page.locator(`#${id}`).evaluate((el) => {
      // the test's tsconfig has no DOM lib: the canvas as far as this count needs it
      const c = el as unknown as {
        width: number;
        height: number;
        getContext(kind: '2d'): { getImageData(x: number, y: number, w: number, h: number): { data: ArrayLike<number> } } | null;
      };
      const d = c.getContext('2d')!.getImageData(0, 0, c.width, c.height).data;
      let n = 0;
      for (let i = 0; i < d.length; i += 4) if (d[i]! < 64) n++;
      return n;
    });

  it('a supervisor enrols from the staff screen, keeps the recovery codes, and the next sign-in asks for the code', async () => {
    const s = await ui.start();
    const page = await ui.open(s);
    await ui.signIn(page);
    await page.locator('#tabbtn-staff').click();
    await page.locator('#mytotp-status').filter({ hasText: 'Not set up' }).waitFor();
    await page.locator('#mytotp-start').click();
    // starting an enrolment asks for her own password in the dialog (a session alone is not enough)
    const pw = page.locator('#confirm-password');
    await pw.waitFor();
    expect([await pw.getAttribute('type'), await pw.getAttribute('autocomplete')]).toEqual(['password', 'current-password']);
    expect(await page.locator('#confirm-input').isHidden()).toBe(true);
    await page.locator('#confirm-ok').click();
    await page.locator('#confirm-error').filter({ hasText: 'type your password' }).waitFor();
    await pw.fill('not her password at all');
    await page.locator('#confirm-ok').click();
    await page.locator('#confirm-error').filter({ hasText: 'not your password' }).waitFor();
    expect(await pw.inputValue()).toBe('');
    expect(await page.locator('#mytotp-enrol').isHidden()).toBe(true);
    await pw.fill(SUPERVISOR.password);
    await page.locator('#confirm-ok').click();
    await page.locator('#confirm').waitFor({ state: 'hidden' });
    expect(await pw.inputValue()).toBe('');
    const secretEl = page.locator('#mytotp-secret');
    await secretEl.filter({ hasText: /^[A-Z2-7]{32}$/ }).waitFor();
    const secret = (await secretEl.textContent())!;
    expect(await darkPixels(page, 'mytotp-qr')).toBeGreaterThan(1000);
    await page.screenshot({ path: `${SHOTS}/totp-enrol-en.png`, fullPage: true });

    await page.locator('#mytotp-code').fill('000000');
    await page.locator('#mytotp-enrol button[type=submit]').click();
    await page.locator('#mytotp-message').filter({ hasText: 'not the current code' }).waitFor();
    await page.locator('#mytotp-code').fill(codeAt(s, secret));
    await page.locator('#mytotp-enrol button[type=submit]').click();
    await page.locator('#screen-recovery').waitFor();
    const codes = await page.locator('#recovery-list li').allTextContents();
    expect(codes).toHaveLength(10);
    await page.screenshot({ path: `${SHOTS}/totp-recovery-codes-en.png` });
    for (const c of codes) expect(c).toMatch(/^[0-9A-Z]{5}-[0-9A-Z]{5}$/);
    await page.locator('#recovery-done').click();
    await page.locator('#mytotp-status').filter({ hasText: 'On:' }).waitFor();
    // the key was shown once: gone from the page
    expect(await page.locator('#mytotp-secret').textContent()).toBe('');
    expect(await page.locator('body').innerText()).not.toContain(secret);

    await page.locator('#signout').click();
    await page.locator('#screen-signin').waitFor();
    await ui.signIn(page);
    await page.locator('#screen-totp').waitFor();
    expect(await page.locator('#screen-app').isHidden()).toBe(true);
    expect(await page.context().cookies()).toEqual([]);
    await page.screenshot({ path: `${SHOTS}/totp-code-step-en.png` });
    // the code used for the enrolment is spent
    await page.locator('#totp-code').fill(codeAt(s, secret));
    await page.locator('#totp-form button[type=submit]').click();
    await page.locator('#totp-message').filter({ hasText: 'used already' }).waitFor();
    s.f.clock.advance(30_000);
    await page.locator('#totp-code').fill(codeAt(s, secret));
    await page.locator('#totp-form button[type=submit]').click();
    await page.locator('#whoami').filter({ hasText: 'Aiko Tanaka · Supervisor' }).waitFor();

    // a recovery code works once, typed into the same field
    await page.locator('#signout').click();
    await ui.signIn(page);
    await page.locator('#screen-totp').waitFor();
    await page.locator('#totp-code').fill(codes[0]!);
    await page.locator('#totp-form button[type=submit]').click();
    await page.locator('#whoami').filter({ hasText: 'Aiko Tanaka' }).waitFor();
  });

  it('under policy required, a supervisor without a second factor sets it up at sign-in, before any session', async () => {
    const s = await ui.start({ overrides: { staffTotp: { supervisors: 'required' } } });
    const page = await ui.open(s);
    await ui.signIn(page);
    await page.locator('#screen-totp').waitFor();
    await page.locator('#totp-enrol').waitFor();
    const secretEl = page.locator('#totp-secret');
    await secretEl.filter({ hasText: /^[A-Z2-7]{32}$/ }).waitFor();
    expect(await darkPixels(page, 'totp-qr')).toBeGreaterThan(1000);
    expect(await page.context().cookies()).toEqual([]);
    await page.locator('#totp-code').fill(codeAt(s, (await secretEl.textContent())!));
    await page.locator('#totp-form button[type=submit]').click();
    await page.locator('#screen-recovery').waitFor();
    expect(await page.locator('#recovery-list li').count()).toBe(10);
    await page.locator('#recovery-done').click();
    await page
      .locator('#whoami')
      .filter({ hasText: `${SUPERVISOR.displayName} · Supervisor` })
      .waitFor();
    expect((await page.context().cookies()).map((c) => c.name)).toEqual(['tobira_staff']);
  });
});
