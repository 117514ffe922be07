// Written by `npm run build:console` (scripts/build-console.ts) from src/console/client: not to be edited.
export const CONSOLE_ASSETS = {
  script: {
    file: 'console-1e6ed1918ffd.js',
    integrity: 'sha384-EGJ8CP9pK0vZT45VNC/nGFg+rRSTgmhCriDnh7z2MV6a2dNeiC9CkzddmDPi7NEK',
  },
  style: {
    file: 'console-da5365946641.css',
    integrity: 'sha384-dZHlhF1r/0AN7GTtPKQSPhEL8OBBnIUhFd2WRHYZnnfke+/kBYNSXF8+9Nfm9be3',
  },
} as const;
