// Written by `npm run build:console` (scripts/build-console.ts) from src/console/client: not to be edited.
export const CONSOLE_ASSETS = {
  script: {
    file: 'console-4afabe628952.js',
    integrity: 'sha384-wijOE/SOpCnqH8dzxffXoA8irclER8tFdlXSqU7aAwzpFMX59ceZh4HNl0IQjlnX',
  },
  style: {
    file: 'console-655eed0b2e6a.css',
    integrity: 'sha384-fLdHOMso37Yc70asZPuNUDCe86oW5ZqsI6tg68fvMIjwnfACzy/KyD9oxdA5FKB2',
  },
} as const;
