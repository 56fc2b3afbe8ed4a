// ESLint with type information: floating promises and non-exhaustive switches
// are errors, and domain/ code may import only @tobira/shared (STYLE.md "Layout").
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['**/node_modules/**', '**/dist/**', 'data/**', 'coverage/**', '.stryker-tmp/**', 'reports/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { arguments: false } }],
      '@typescript-eslint/switch-exhaustiveness-check': ['error', { considerDefaultExhaustiveForUnions: true }],
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_' },
      ],
      'no-console': 'error',
    },
  },
  {
    files: ['**/src/domain/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['../adapters/*', '../http/*', '../app/*', '**/adapters/**', '**/http/**'],
              message: 'domain/ imports only @tobira/shared and domain/',
            },
            {
              group: ['pg', 'better-sqlite3', 'mqtt', 'fastify', '@electric-sql/*', 'node:fs', 'node:net'],
              message: 'domain/ is pure: no I/O libraries',
            },
          ],
        },
      ],
      'no-restricted-globals': ['error', { name: 'Date', message: 'domain code takes time as an argument (Clock), never new Date()' }],
    },
  },
  {
    // the gateway's staff web UI: plain browser JavaScript, no build step (type-checked by gateway/ui/tsconfig.json)
    files: ['gateway/ui/**/*.js'],
    languageOptions: {
      sourceType: 'module',
      globals: Object.fromEntries(
        [
          'window',
          'document',
          'location',
          'history',
          'sessionStorage',
          'fetch',
          'performance',
          'AbortSignal',
          'URLSearchParams',
          'Intl',
          'HTMLElement',
          'Node',
          'console',
          'navigator',
          'localStorage',
          'EventSource',
        ].map((g) => [g, 'readonly']),
      ),
    },
    rules: { 'no-console': 'error' },
  },
  {
    files: ['**/scripts/**/*.ts', '**/bench/**/*.ts', '**/cli*.ts', '**/main.ts', 'scripts/**'],
    rules: { 'no-console': 'off' },
  },
);
