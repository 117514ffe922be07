// Written by `npm run build:console` (scripts/build-console.ts) from src/console/client: not to be edited.
export const CONSOLE_ASSETS = {
  script: {
    file: 'console-0bd1013a239b.js',
    integrity: 'sha384-nUTPlQQsetkmbBntYTf+X2B85Q6nSeZAkCUDZJA2xKLEcexUjI2puZLr+584/Tkz',
  },
  style: {
    file: 'console-da5365946641.css',
    integrity: 'sha384-dZHlhF1r/0AN7GTtPKQSPhEL8OBBnIUhFd2WRHYZnnfke+/kBYNSXF8+9Nfm9be3',
  },
} as const;
