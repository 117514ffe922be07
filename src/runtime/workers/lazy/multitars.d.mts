// The module `npm run build:worker-modules` builds from multitars (scripts/build-worker-modules.ts).
export { parseMultipart } from 'multitars';
