// Written by `npm run build:console` (scripts/build-console.ts) from src/console/client: not to be edited.
export const CONSOLE_ASSETS = {
  script: {
    file: 'console-4a3a684480b4.js',
    integrity: 'sha384-MymVvyYgsed5nX1XyiIcVkrXRot0ju0xaMgMqRXWvX0awzzrm8vEuVbSPH72+vaT',
  },
  style: {
    file: 'console-0cd3dc951c9b.css',
    integrity: 'sha384-HZw2XtLnTKGBgjvgSalL0RDiN0lGbXI9hb5A3l4wp442Oq01laQPHYka7fAJk6CJ',
  },
} as const;
