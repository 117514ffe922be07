// Written by `npm run build:console` (scripts/build-console.ts) from src/console/client: not to be edited.
export const CONSOLE_ASSETS = {
  script: {
    file: 'console-d2f0b3504f36.js',
    integrity: 'sha384-vtWTZQG4Rb6v8qvLte49QSo31mGZj+P+IJvpVxj/zcjeHJHldMBq3Gtg1Bhj17R1',
  },
  style: {
    file: 'console-0cd3dc951c9b.css',
    integrity: 'sha384-HZw2XtLnTKGBgjvgSalL0RDiN0lGbXI9hb5A3l4wp442Oq01laQPHYka7fAJk6CJ',
  },
} as const;
