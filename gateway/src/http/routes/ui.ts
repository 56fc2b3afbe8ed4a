import { readFileSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';

/**
 * Sent on every UI answer. The page loads only its own script and style files
 * (no inline script or style, nothing from elsewhere), talks only to this
 * gateway, cannot be framed, and sends no Referer.
 */
export const UI_SECURITY_HEADERS = Object.freeze({
  'content-security-policy':
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'cache-control': 'no-cache',
});

/** The UI's files, fixed: a request can only name one of these, never a path on disk. */
const UI_FILES = [
  { route: '/ui/', file: 'index.html', type: 'text/html; charset=utf-8' },
  { route: '/ui/app.js', file: 'app.js', type: 'text/javascript; charset=utf-8' },
  { route: '/ui/app.css', file: 'app.css', type: 'text/css; charset=utf-8' },
  { route: '/ui/messages.js', file: 'messages.js', type: 'text/javascript; charset=utf-8' },
] as const;

/** gateway/ui, next to this package's src/ (no build step: the files are used as they are in the repository). */
const UI_DIR = new URL('../../../ui/', import.meta.url);

/**
 * The staff web UI: three files read once at start (a handler of our own:
 * three fixed files need no file-system lookup, no range requests and no
 * directory listing, so no @fastify/static). It holds no secret itself and
 * signs in against the staff token like any other client.
 */
export async function uiRoutes(ui: FastifyInstance): Promise<void> {
  ui.addHook('onRequest', async (_req, reply) => {
    void reply.headers(UI_SECURITY_HEADERS);
  });
  for (const f of UI_FILES) {
    const body = readFileSync(new URL(f.file, UI_DIR));
    ui.get(f.route, async (_req, reply) => reply.header('content-type', f.type).send(body));
  }
  ui.get('/', async (_req, reply) => reply.redirect('/ui/', 302));
  ui.get('/ui', async (_req, reply) => reply.redirect('/ui/', 302));
}
