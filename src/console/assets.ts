// Written by `npm run build:console` (scripts/build-console.ts) from src/console/client: not to be edited.
export const CONSOLE_ASSETS = {
  script: {
    file: 'console-f99ad8fc0a12.js',
    integrity: 'sha384-bQ+Ll6YW2rsfICEE38oVjIwpfXcv6x1vQlP4c/C8m9beSE65Z92Dn/Y9XAM2Ekex',
  },
  style: {
    file: 'console-994aa890b949.css',
    integrity: 'sha384-LqiDUMJIvUvvqoJIBlKLc+jhqtpeF56WbS87HQKJHgHsQJ7yx6ueeWZXymLqavBv',
  },
} as const;
