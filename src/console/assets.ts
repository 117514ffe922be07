// Written by `npm run build:console` (scripts/build-console.ts) from src/console/client: not to be edited.
export const CONSOLE_ASSETS = {
  script: {
    file: 'console-b4efcc7203a0.js',
    integrity: 'sha384-/Sk2K0/qQV8f7a2d66vg++3BbseWUjB2F+fjONkaRM1S4koUmm41ffKlIcuBMezq',
  },
  style: {
    file: 'console-da5365946641.css',
    integrity: 'sha384-dZHlhF1r/0AN7GTtPKQSPhEL8OBBnIUhFd2WRHYZnnfke+/kBYNSXF8+9Nfm9be3',
  },
} as const;
