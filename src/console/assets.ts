// Written by `npm run build:console` (scripts/build-console.ts) from src/console/client: not to be edited.
export const CONSOLE_ASSETS = {
  script: {
    file: 'console-040b8ab41d2d.js',
    integrity: 'sha384-CpZ15vTuCrJGBJQkdjKEUgIx7LUDHp9DlzU4qiMkvC8zih/Gm05OKQPMK0krNdoi',
  },
  style: {
    file: 'console-890228aab4f3.css',
    integrity: 'sha384-T3HArgapXu+yIvYe7tJ5xOh3JX4x9NJ6/lG+D/3jy1+mGr/pVu/lDAwYsyFfW1+w',
  },
} as const;
