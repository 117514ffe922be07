// Written by `npm run build:console` (scripts/build-console.ts) from src/console/client: not to be edited.
export const CONSOLE_ASSETS = {
  script: {
    file: 'console-bfc0abdc45eb.js',
    integrity: 'sha384-tDfnlbNLNcQB1xeLfubxyQhiPrP+Wufkllms6p7OTSCa/yfy9U1LBuJYEcUUU62b',
  },
  style: {
    file: 'console-655eed0b2e6a.css',
    integrity: 'sha384-fLdHOMso37Yc70asZPuNUDCe86oW5ZqsI6tg68fvMIjwnfACzy/KyD9oxdA5FKB2',
  },
} as const;
