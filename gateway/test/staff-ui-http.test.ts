import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { DECISION_CODES, newId } from '@tobira/shared';
import type { FastifyInstance } from 'fastify';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openDatabase, type WritableDb } from '../src/adapters/sqlite/db.js';
import { GatewayStore } from '../src/adapters/sqlite/store.js';
import { UI_SECURITY_HEADERS } from '../src/http/app.js';
import { T0 } from './fixtures.js';
import { capturingLog, staffAppOver } from './staff-helpers.js';

const TOKEN = 'staff-token-for-ui-tests';
const auth = { authorization: `Bearer ${TOKEN}` };
const UI_DIR = new URL('../ui/', import.meta.url);

describe('the staff web UI and the alarm acknowledgement over HTTP (inject, real SQLite file)', () => {
  let dir: string;
  let db: WritableDb;
  let store: GatewayStore;
  let app: FastifyInstance;
  let now = T0;
  const cap = capturingLog();
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'tobira-ui-'));
    db = openDatabase(join(dir, 'g.sqlite'));
    store = new GatewayStore(db);
    store.upsertLock('lock-1', 'door-1', T0);
    now = T0;
    app = staffAppOver(store, { staffToken: TOKEN, now: () => now, log: cap.log });
  });
  afterEach(async () => {
    await app.close();
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  describe('static files', () => {
    it('serves the page, its one script and its one stylesheet with their types and the security headers, without a token', async () => {
      for (const [url, file, type] of [
        ['/ui/', 'index.html', 'text/html'],
        ['/ui/app.js', 'app.js', 'text/javascript'],
        ['/ui/app.css', 'app.css', 'text/css'],
        ['/ui/messages.js', 'messages.js', 'text/javascript'],
      ] as const) {
        const r = await app.inject({ method: 'GET', url });
        expect(r.statusCode, url).toBe(200);
        expect(r.headers['content-type'], url).toMatch(new RegExp(`^${type}`));
        expect(r.body, url).toBe(readFileSync(new URL(file, UI_DIR), 'utf8'));
        for (const [h, v] of Object.entries(UI_SECURITY_HEADERS)) expect(r.headers[h], `${url} ${h}`).toBe(v);
      }
    });

    it('has a strict policy: only its own files, no inline script or style, no framing, no referrer', async () => {
      const r = await app.inject({ method: 'GET', url: '/ui/' });
      const csp = String(r.headers['content-security-policy']);
      expect(csp).toContain("default-src 'self'");
      expect(csp).toContain("frame-ancestors 'none'");
      expect(csp).not.toMatch(/unsafe-inline|unsafe-eval|\*|data:/);
      expect(r.headers['x-content-type-options']).toBe('nosniff');
      expect(r.headers['referrer-policy']).toBe('no-referrer');
      // and the page itself needs nothing the policy forbids
      expect(r.body).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>|<style|\sstyle=|\son[a-z]+=/i);
      expect(r.body).toContain('<script type="module" src="app.js"></script>');
    });

    it('redirects / and /ui to /ui/, with the security headers', async () => {
      for (const url of ['/', '/ui']) {
        const r = await app.inject({ method: 'GET', url });
        expect(r.statusCode, url).toBe(302);
        expect(r.headers.location, url).toBe('/ui/');
        expect(r.headers['content-security-policy'], url).toBe(UI_SECURITY_HEADERS['content-security-policy']);
      }
    });

    it('serves nothing else from the folder (no path reaches the disk)', async () => {
      for (const url of ['/ui/tsconfig.json', '/ui/../src/http/app.ts', '/ui/%2e%2e/package.json', '/ui/index.html/']) {
        const r = await app.inject({ method: 'GET', url });
        expect(r.statusCode, url).toBe(404);
      }
    });

    it('puts API values in the page only as text: the script never uses innerHTML, outerHTML, insertAdjacentHTML or document.write', () => {
      const js = readFileSync(new URL('app.js', UI_DIR), 'utf8');
      expect(js).not.toMatch(/\.innerHTML|\.outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function/);
    });

    it('has plain words for every decision code in each language, and shows an unknown code as it is', async () => {
      const ui = (await import(pathToFileURL(new URL('app.js', UI_DIR).pathname).href)) as {
        decisionWords(code: string): string;
        setLanguageForTest(l: 'en' | 'ja'): void;
      };
      for (const l of ['en', 'ja'] as const) {
        ui.setLanguageForTest(l);
        for (const code of Object.keys(DECISION_CODES)) expect(ui.decisionWords(code)).not.toContain(code);
        expect(ui.decisionWords('SOMETHING_NEW')).toContain('SOMETHING_NEW');
        expect(ui.decisionWords('toString')).toContain('toString');
      }
      ui.setLanguageForTest('en');
    });
  });

  describe('POST /staff/alarms/:alarmId/ack', () => {
    const ack = (alarmId: string, payload?: unknown, headers: Record<string, string> = auth) =>
      app.inject({
        method: 'POST',
        url: `/staff/alarms/${encodeURIComponent(alarmId)}/ack`,
        headers,
        ...(payload === undefined ? {} : { payload: payload as object }),
      });
    const row = (alarmId: string) =>
      db.prepare('SELECT closed_at, closed_by FROM alarms WHERE alarm_id = ?').get(alarmId) as {
        closed_at: number | null;
        closed_by: string | null;
      };

    it('refuses without the token (401) or with a wrong one, and changes nothing', async () => {
      const id = newId();
      store.insertAlarm({ alarmId: id, lockId: 'lock-1', kind: 'tamper', at: T0 }, T0);
      expect((await ack(id, {}, {})).statusCode).toBe(401);
      expect((await ack(id, {}, { authorization: 'Bearer wrong-token-0123456789' })).statusCode).toBe(401);
      expect(row(id)).toEqual({ closed_at: null, closed_by: null });
    });

    it('answers 503 STAFF_AUTH_NOT_CONFIGURED when no token is configured', async () => {
      const bare = staffAppOver(store, { staffToken: undefined });
      const r = await bare.inject({ method: 'POST', url: `/staff/alarms/${newId()}/ack`, headers: auth, payload: {} });
      expect(r.statusCode).toBe(503);
      expect(r.json()).toEqual({ code: 'STAFF_AUTH_NOT_CONFIGURED' });
      await bare.close();
    });

    it('answers 404 ALARM_NOT_FOUND for an alarm that does not exist', async () => {
      const r = await ack(newId(), {});
      expect(r.statusCode).toBe(404);
      expect(r.json()).toEqual({ code: 'ALARM_NOT_FOUND' });
    });

    it('closes an open alarm once (applied), a second ack is a noop that keeps the first, and other alarms stay open', async () => {
      const id = newId();
      const other = newId();
      store.insertAlarm({ alarmId: id, lockId: 'lock-1', kind: 'forced_open', at: T0 - 10 }, T0);
      store.insertAlarm({ alarmId: other, lockId: 'lock-1', kind: 'jam', at: T0 - 5 }, T0);
      now = T0 + 1000;
      const r1 = await ack(id, { note: 'checked on camera' }, { ...auth, 'x-correlation-id': 'night-ack-1' });
      expect(r1.statusCode).toBe(200);
      expect(r1.json()).toEqual({
        status: 'applied',
        alarm: {
          alarmId: id,
          lockId: 'lock-1',
          doorId: 'door-1',
          kind: 'forced_open',
          status: 'closed',
          at: T0 - 10,
          receivedAt: T0,
          closedAt: T0 + 1000,
          closedBy: 'staff: checked on camera',
          count: 1,
          firstSeenAt: T0,
          lastSeenAt: T0,
          endedAt: null,
        },
      });
      expect(row(id)).toEqual({ closed_at: T0 + 1000, closed_by: 'staff: checked on camera' });

      now = T0 + 5000;
      const r2 = await ack(id);
      expect(r2.statusCode).toBe(200);
      expect(r2.json()).toMatchObject({
        status: 'noop',
        alarm: { status: 'closed', closedAt: T0 + 1000, closedBy: 'staff: checked on camera' },
      });
      expect(row(other)).toEqual({ closed_at: null, closed_by: null });

      const open = await app.inject({ method: 'GET', url: '/staff/alarms?status=open', headers: auth });
      expect((open.json() as { items: { alarmId: string }[] }).items.map((a) => a.alarmId)).toEqual([other]);
      expect(cap.lines().some((l) => l.msg === 'http request' && l.cid === 'night-ack-1' && l.status === 200)).toBe(true);
    });

    it('records plain "staff" without a note, and refuses an unknown body field or an over-long note (422)', async () => {
      const id = newId();
      store.insertAlarm({ alarmId: id, lockId: 'lock-1', kind: 'door_ajar', at: T0 }, T0);
      expect((await ack(id, { surprise: 1 })).statusCode).toBe(422);
      expect((await ack(id, { note: 'x'.repeat(201) })).statusCode).toBe(422);
      expect(row(id).closed_at).toBeNull();
      const r = await ack(id);
      expect(r.statusCode).toBe(200);
      expect(row(id)).toEqual({ closed_at: T0, closed_by: 'staff' });
    });
  });
});
