// @ts-check
// Lint with type information: what the compiler cannot see but a reader must, above all promises
// nobody waits for or handles. Formatting is prettier's (.prettierrc.json), not a rule here: no
// stylistic rule is on, so the two never disagree.
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'dist/**',
      'node_modules/**',
      '.wrangler/**',
      'coverage/**',
      'src/http/openapi/assets/**',
      'src/runtime/workers/lazy/*.mjs',
      'drizzle/meta/**',
    ],
  },
  {
    // The JavaScript files too: tsconfig.json's allowJs puts them in Node's program, each checked by
    // its own `// @ts-check`.
    files: ['**/*.ts', '**/*.js', '**/*.mjs'],
    extends: [tseslint.configs.base],
    languageOptions: {
      parserOptions: {
        // Three programs: Node's (tsconfig.json), the Worker's, checked without Node's types, and the
        // console's browser code, with the DOM's.
        project: ['./tsconfig.json', './test/workers/tsconfig.json', './src/console/client/tsconfig.json'],
        tsconfigRootDir: import.meta.dirname,
      },
    },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/switch-exhaustiveness-check': ['error', { considerDefaultExhaustiveForUnions: true }],
      '@typescript-eslint/no-non-null-assertion': 'error',
      '@typescript-eslint/no-unnecessary-type-assertion': 'error',
    },
  },
);
