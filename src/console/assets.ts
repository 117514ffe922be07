// Written by `npm run build:console` (scripts/build-console.ts) from src/console/client: not to be edited.
export const CONSOLE_ASSETS = {
  script: {
    file: 'console-099c55a3cec9.js',
    integrity: 'sha384-TWyb6s5TImZj21swA9Yhtcck5nJC4GpZhi/5ekJjkHwPWJsnAsjqvSoArbGmE7he',
  },
  style: {
    file: 'console-61316af599d7.css',
    integrity: 'sha384-tKeDQ6ey25HSpd5ZiMwMeTHeitjPHyF6Ws1+rJlFL5feiu9EqxZwlfcX8auhcWQd',
  },
} as const;
