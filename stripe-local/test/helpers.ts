/** Each test starts its own stripe-local on port 0 and a webhook receiver, and closes both. */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Stripe from 'stripe';
import { startStripeLocal, stripeClient, type StripeLocal, type StripeLocalOptions, type StripeClientOptions } from '../src/index.js';

export const WEBHOOK_SECRET = 'whsec_test_tobira_local_receiver';

export interface Local {
  local: StripeLocal;
  stripe: Stripe;
  client(options?: StripeClientOptions): Stripe;
}

export async function withLocal(options: StripeLocalOptions = {}, client: StripeClientOptions = { maxNetworkRetries: 0 }): Promise<Local> {
  const local = await startStripeLocal({ webhookRetry: { backoffMs: 20, maxBackoffMs: 100, attempts: 4, timeoutMs: 2_000 }, ...options });
  return { local, stripe: stripeClient(local, client), client: (o) => stripeClient(local, o) };
}

export interface Received {
  rawBody: string;
  signature: string;
}

/** A webhook endpoint that records raw bodies and answers with `answer(n)` for its n-th request (default 200). */
export interface Receiver {
  url: string;
  received: Received[];
  close(): Promise<void>;
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

export async function startReceiver(answer: (n: number) => number = () => 200): Promise<Receiver> {
  const received: Received[] = [];
  let n = 0;
  const server: Server = createServer((req, res) => {
    void readBody(req).then((rawBody) => {
      n += 1;
      received.push({ rawBody, signature: String(req.headers['stripe-signature'] ?? '') });
      res.statusCode = answer(n);
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/webhooks/stripe`,
    received,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** The check the cloud will make: the real SDK verifying the raw body against the signing secret. */
export function verify(r: Received, secret = WEBHOOK_SECRET): Stripe.Event {
  return Stripe.webhooks.constructEvent(r.rawBody, r.signature, secret);
}

/** The answer the SDK kept of its last call (headers lower-cased). */
export function lastHeaders(o: { lastResponse: { headers: Record<string, string> } }): Record<string, string> {
  return o.lastResponse.headers;
}

/** The error a call rejected with (fails the test if it resolved). */
export async function rejection(p: Promise<unknown>): Promise<Stripe.errors.StripeError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof Stripe.errors.StripeError) return e;
    throw e;
  }
  throw new Error('expected the call to fail, it succeeded');
}
