// Written by `npm run build:console` (scripts/build-console.ts) from src/console/client: not to be edited.
export const CONSOLE_ASSETS = {
  script: {
    file: 'console-5a7b6de748e2.js',
    integrity: 'sha384-yBep6AnWShaeDvMGRuqeAj5zrqJ1kl2s+RmRdlqZeCUIk+2nnHHwjk9veM6JC5FT',
  },
  style: {
    file: 'console-0cd3dc951c9b.css',
    integrity: 'sha384-HZw2XtLnTKGBgjvgSalL0RDiN0lGbXI9hb5A3l4wp442Oq01laQPHYka7fAJk6CJ',
  },
} as const;
