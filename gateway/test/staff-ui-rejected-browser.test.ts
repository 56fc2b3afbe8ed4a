import { describe, expect, it } from 'vitest';
import { waitFor } from './harness.js';
import { browserSuite } from './ui-browser.js';

/**
 * The Problems tab of the staff web UI shows what a rejected downlink claimed
 * (unverified), in a real Chromium against a running gateway, like
 * staff-ui-browser.test.ts (Debian's Chromium, never a downloaded build; no
 * sleeps, no timing assertions).
 */
const MARKUP_ISSUER = '<img src=x onerror="window.__xss=3">';

describe('staff web UI: rejected downlinks in Chromium against a running gateway', () => {
  const ui = browserSuite();

  it('shows the claimed message id, correlation id, type, seq and issuer as unverified text, and nothing claimed for garbage', async () => {
    const s = await ui.start();
    // signed with a key the gateway does not know; the issuer it claims carries markup (printable ASCII, so it is kept)
    const foreign = await s.cloud.sign(
      { type: 'key.revoke', seq: 5, cid: 'cloud-req-77', body: { keyId: 'key-1', version: 2, reason: 'staff_revoked' } },
      s.f.otherKey,
      MARKUP_ISSUER,
    );
    await s.cloud.publishRaw(foreign.token);
    await waitFor(() => s.gw.store.rejectedCount() === 1, 'foreign message rejected');
    await s.cloud.publishRaw('garbage, not a JWS');
    await waitFor(() => s.gw.store.rejectedCount() === 2, 'garbage rejected');

    const page = await ui.open(s);
    await ui.signIn(page);
    await page.locator('[data-tab="problems"]').click();

    const rows = page.locator('#rejected-list > li');
    await rows.nth(1).waitFor();
    expect(await rows.count()).toBe(2);
    // newest first: the garbage claims nothing, so it has no claimed line
    expect(await rows.nth(0).locator('.claimed').count()).toBe(0);
    expect(await rows.nth(0).innerText()).toContain('MALFORMED');
    const claimed = rows.nth(1).locator('.claimed');
    const text = await claimed.innerText();
    expect(text).toContain('Claimed (unverified):');
    for (const part of [
      `Message id ${foreign.message.jti}`,
      'Correlation id cloud-req-77',
      'Type key.revoke',
      'Seq 5',
      `Issuer ${MARKUP_ISSUER}`,
    ])
      expect(text).toContain(part);
    expect(await claimed.getAttribute('title')).toMatch(/without verifying/);
    expect(await rows.nth(1).innerText()).toContain('UNKNOWN_KID');

    expect(await page.locator('img').count()).toBe(0);
    expect(await page.evaluate('typeof window.__xss')).toBe('undefined');
  });
});
