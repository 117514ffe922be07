// Written by `npm run build:console` (scripts/build-console.ts) from src/console/client: not to be edited.
export const CONSOLE_ASSETS = {
  script: {
    file: 'console-f272bc62736a.js',
    integrity: 'sha384-6gYiqVI29py7Hkl5SnGGipG+PubYgnM3I+2q2vuU/v695FmExm+xi+dd9OwjVzux',
  },
  style: {
    file: 'console-890228aab4f3.css',
    integrity: 'sha384-T3HArgapXu+yIvYe7tJ5xOh3JX4x9NJ6/lG+D/3jy1+mGr/pVu/lDAwYsyFfW1+w',
  },
} as const;
