import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['{shared,cloud,gateway,firmware-sim,demo,stripe-local,scripts,bench,chaos}/test/**/*.test.ts'],
    globalSetup: ['shared/src/testing/global-setup.ts'],
    pool: 'forks',
    testTimeout: 30_000,
    hookTimeout: 60_000,
    env: { LOG_LEVEL: process.env.LOG_LEVEL ?? 'silent' },
  },
});
