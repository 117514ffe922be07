// Written by `npm run build:console` (scripts/build-console.ts) from src/console/client: not to be edited.
export const CONSOLE_ASSETS = {
  script: {
    file: 'console-f00678d2578a.js',
    integrity: 'sha384-vnVTBEwRvfrZIZCV7rvO0OQq92P2BxcBCMHeszSpir+i9UFBfI6HUNTVi/aHNUdY',
  },
  style: {
    file: 'console-0cd3dc951c9b.css',
    integrity: 'sha384-HZw2XtLnTKGBgjvgSalL0RDiN0lGbXI9hb5A3l4wp442Oq01laQPHYka7fAJk6CJ',
  },
} as const;
