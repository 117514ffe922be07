// Written by `npm run build:console` (scripts/build-console.ts) from src/console/client: not to be edited.
export const CONSOLE_ASSETS = {
  script: {
    file: 'console-c6724b7eb475.js',
    integrity: 'sha384-ZLPghFj/3vr2Iq5Z/TCOy6eDUVKQn0g5uXOW3YiwA0TRZAe2Hfi+HUPbiNXJRn7C',
  },
  style: {
    file: 'console-61316af599d7.css',
    integrity: 'sha384-tKeDQ6ey25HSpd5ZiMwMeTHeitjPHyF6Ws1+rJlFL5feiu9EqxZwlfcX8auhcWQd',
  },
} as const;
