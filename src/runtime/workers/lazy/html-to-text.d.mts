// The module `npm run build:worker-modules` builds from html-to-text (scripts/build-worker-modules.ts).
export { convert } from 'html-to-text';
