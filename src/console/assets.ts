// Written by `npm run build:console` (scripts/build-console.ts) from src/console/client: not to be edited.
export const CONSOLE_ASSETS = {
  script: {
    file: 'console-b2047a12c375.js',
    integrity: 'sha384-2KtkHzRYgPPZ8pneTCNY0ymgtSSWdt3/9GbI50XBbbrFABV6QwuJy8fIEDWdsEPa',
  },
  style: {
    file: 'console-43ed88af37ac.css',
    integrity: 'sha384-eIzBUklS2Ux+rEaknoWiKmcSbYRKHTsKQF3+M3HqFuSp2/LmyJ0B92YYsEYfMQZz',
  },
} as const;
