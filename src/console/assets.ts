// Written by `npm run build:console` (scripts/build-console.ts) from src/console/client: not to be edited.
export const CONSOLE_ASSETS = {
  script: {
    file: 'console-19dab88df1e0.js',
    integrity: 'sha384-+byNEsRUnizbavgxw1JM9FIEEZZEm9PB6J+HGaRmRQjSTJ0blu3VOc2PJu17aQIv',
  },
  style: {
    file: 'console-890228aab4f3.css',
    integrity: 'sha384-T3HArgapXu+yIvYe7tJ5xOh3JX4x9NJ6/lG+D/3jy1+mGr/pVu/lDAwYsyFfW1+w',
  },
} as const;
