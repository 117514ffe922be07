import type { Libraries } from './deps';

/**
 * The gateway Worker's modules beside its script (wrangler.toml's `rules`, the files `npm run
 * build:worker-modules` writes), imported when a request first needs one: the script does not
 * carry them, nor does its start-up evaluate them. Imported here, at the root of src/, because
 * wrangler leaves such an import's text as written and the runtime resolves it from the script's
 * place, which is src/'s: the same text must name the file from both.
 */
export const workerLibraries: Libraries = {
  htmlToText: () => import('./runtime/workers/lazy/html-to-text.mjs'),
  multipart: () => import('./runtime/workers/lazy/multitars.mjs'),
};
