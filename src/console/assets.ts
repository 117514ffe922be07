// Written by `npm run build:console` (scripts/build-console.ts) from src/console/client: not to be edited.
export const CONSOLE_ASSETS = {
  script: {
    file: 'console-b1aa0ac6aff2.js',
    integrity: 'sha384-oDhYYHMVAvnTqkQtS9B175nSbFycrFyXOR/lqe7l97BpXuLarlK97YdaNPPiY52j',
  },
  style: {
    file: 'console-da5365946641.css',
    integrity: 'sha384-dZHlhF1r/0AN7GTtPKQSPhEL8OBBnIUhFd2WRHYZnnfke+/kBYNSXF8+9Nfm9be3',
  },
} as const;
