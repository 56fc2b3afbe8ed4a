import { defineConfig } from 'vitest/config';

/**
 * The tests mutation testing runs against `cloud/src/domain/` (stryker.config.json, `npm run mutation`):
 * the pure decision tests, no database or network, so each mutant is judged in milliseconds.
 */
export default defineConfig({
  test: {
    include: [
      'cloud/test/check-in-gates.test.ts',
      'cloud/test/domain-keys.test.ts',
      'cloud/test/domain-model.test.ts',
      'cloud/test/membership-domain.test.ts',
      'cloud/test/notifications-templates.test.ts',
      'cloud/test/state-machines.test.ts',
      'cloud/test/stays-domain.test.ts',
      'cloud/test/domain-*.test.ts',
    ],
    pool: 'forks',
    testTimeout: 30_000,
    env: { LOG_LEVEL: 'silent' },
  },
});
