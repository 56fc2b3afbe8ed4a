import { createHmac } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { guardedLookup, resolveAll, type ResolveAll } from './egress.js';

/** `Tobira-Signature: t=<unix ms>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`; receivers check it and reject old `t`. */
export function signWebhook(secret: string, t: number, body: string): string {
  return `t=${t},v1=${createHmac('sha256', secret).update(`${t}.${body}`).digest('hex')}`;
}

export class DeliveryTimeout extends Error {
  override readonly name = 'DeliveryTimeout';
}

/**
 * Deliver: one POST with node:http(s) (not fetch: it takes a `lookup` hook),
 * a fresh connection each time (`agent: false`: a pooled socket could have
 * been opened under another policy), redirects not followed (node:http never
 * does), bounded by `timeoutMs` up to the answer's status. With `guard`, the
 * address actually connected to must be public (egress.ts). Resolves the
 * status; the answer's body is not read.
 */
export function postWebhook(
  url: URL,
  headers: Record<string, string>,
  body: string,
  o: { readonly timeoutMs: number; readonly guard: boolean; readonly resolve?: ResolveAll | undefined },
): Promise<number> {
  const request = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise<number>((resolve, reject) => {
    const req = request(
      url,
      {
        method: 'POST',
        headers: { ...headers, 'content-length': String(Buffer.byteLength(body)), 'user-agent': 'tobira-webhooks' },
        agent: false,
        ...(o.guard ? { lookup: guardedLookup(o.resolve ?? resolveAll) } : {}),
      },
      (res) => {
        clearTimeout(timer);
        resolve(res.statusCode ?? 0);
        res.destroy();
      },
    );
    const timer = setTimeout(() => req.destroy(new DeliveryTimeout(`timed out after ${o.timeoutMs} ms`)), o.timeoutMs);
    req.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    req.end(body);
  });
}
