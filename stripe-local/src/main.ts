/**
 * CLI: `npm start -w stripe-local` or `node --import tsx stripe-local/src/main.ts`.
 * Env (parsed once at start): STRIPE_LOCAL_PORT (default 12111, stripe-mock's
 * port), STRIPE_LOCAL_HOST (127.0.0.1), STRIPE_SECRET_KEY (the key clients
 * must send; default DEFAULT_SECRET_KEY), STRIPE_LOCAL_WEBHOOK_URL +
 * STRIPE_WEBHOOK_SECRET (one webhook endpoint), STRIPE_LOCAL_SEED (id seed;
 * default: the start time, so a restart never reissues an earlier run's ids).
 * SIGTERM/SIGINT close the server; a second signal forces.
 */
import { z } from 'zod';
import { createLogger, onShutdownSignals } from '@tobira/shared';
import { DEFAULT_SECRET_KEY, startStripeLocal } from './server.js';

const Env = z
  .object({
    STRIPE_LOCAL_PORT: z.coerce.number().int().min(0).max(65535).default(12111),
    STRIPE_LOCAL_HOST: z.string().default('127.0.0.1'),
    STRIPE_SECRET_KEY: z.string().startsWith('sk_test_').default(DEFAULT_SECRET_KEY),
    STRIPE_LOCAL_WEBHOOK_URL: z.url().optional(),
    STRIPE_WEBHOOK_SECRET: z.string().startsWith('whsec_').optional(),
    STRIPE_LOCAL_SEED: z
      .string()
      .regex(/^[A-Za-z0-9]{1,8}$/)
      .optional(),
  })
  .refine((e) => (e.STRIPE_LOCAL_WEBHOOK_URL === undefined) === (e.STRIPE_WEBHOOK_SECRET === undefined), {
    message: 'STRIPE_LOCAL_WEBHOOK_URL and STRIPE_WEBHOOK_SECRET go together',
  });

const log = createLogger('stripe-local');

async function main(): Promise<void> {
  const parsed = Env.safeParse(process.env);
  if (!parsed.success) {
    log.error({ issues: parsed.error.issues }, 'bad environment');
    process.exit(2);
  }
  const env = Object.freeze(parsed.data);
  const local = await startStripeLocal({
    port: env.STRIPE_LOCAL_PORT,
    host: env.STRIPE_LOCAL_HOST,
    secretKey: env.STRIPE_SECRET_KEY,
    seed: env.STRIPE_LOCAL_SEED ?? Date.now().toString(36).slice(-8),
    log,
    ...(env.STRIPE_LOCAL_WEBHOOK_URL !== undefined && env.STRIPE_WEBHOOK_SECRET !== undefined
      ? { webhook: { url: env.STRIPE_LOCAL_WEBHOOK_URL, secret: env.STRIPE_WEBHOOK_SECRET } }
      : {}),
  });
  onShutdownSignals({
    graceful: (sig) => {
      log.info({ sig }, 'stopping');
      local.close().then(
        () => process.exit(0),
        (e: unknown) => {
          log.error({ err: e }, 'close failed');
          process.exit(1);
        },
      );
    },
    forced: (sig) => {
      // nothing durable: the account lives in memory by design
      log.warn({ sig }, 'second signal: forcing exit');
      process.exit(1);
    },
  });
  log.info({ url: local.url, webhook: env.STRIPE_LOCAL_WEBHOOK_URL ?? null }, 'stripe-local ready');
}

main().catch((e: unknown) => {
  log.error({ err: e }, 'stripe-local failed to start');
  process.exit(1);
});
