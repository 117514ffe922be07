import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Tests spawn servers and CLIs; a slow CI machine should not turn that into flakes.
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
