// Written by `npm run build:console` (scripts/build-console.ts) from src/console/client: not to be edited.
export const CONSOLE_ASSETS = {
  script: {
    file: 'console-7c3fc6b85960.js',
    integrity: 'sha384-gf65BWf8fOd4nDPcxsu0ArZmV/yjOZOFMLISBi0n5g4b411wxP8pRM3SBAgtL95q',
  },
  style: {
    file: 'console-da5365946641.css',
    integrity: 'sha384-dZHlhF1r/0AN7GTtPKQSPhEL8OBBnIUhFd2WRHYZnnfke+/kBYNSXF8+9Nfm9be3',
  },
} as const;
