import { Hono } from 'hono';
import type { DepsVariables } from '../http/middleware/deps';
import { CONSOLE_ASSETS } from './assets';

/**
 * The console (docs/console.md): one page, and the script and style sheet it loads, built by
 * `npm run build:console` into the gateway's own files (http/openapi/assets; Deps.staticAsset reads
 * them from the package on Node, from the [assets] binding on Workers). The page is a client of
 * the public /v1 API with the key the user types in, which it keeps in memory only: nothing here
 * knows a key, so this is served without one.
 */

/**
 * Nothing but the gateway's own origin, and no inline script or style: data rendered by mistake as
 * markup could not run. No framing (clickjacking), no referrer.
 */
const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
} as const;

const PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Console · Assistants gateway</title>
<link rel="stylesheet" href="/console/assets/${CONSOLE_ASSETS.style.file}" integrity="${CONSOLE_ASSETS.style.integrity}">
<script type="module" src="/console/assets/${CONSOLE_ASSETS.script.file}" integrity="${CONSOLE_ASSETS.script.integrity}"></script>
</head>
<body>
<div id="console"><main><h1>Assistants gateway console</h1><noscript><p>The console needs JavaScript.</p></noscript></main></div>
</body>
</html>
`;

const TYPES = new Map<string, string>([
  [CONSOLE_ASSETS.script.file, 'text/javascript; charset=utf-8'],
  [CONSOLE_ASSETS.style.file, 'text/css; charset=utf-8'],
]);

export const consoleRoutes = new Hono<{ Variables: DepsVariables }>()
  // The page names its files by their hash: asked again on each visit (no-cache), it is always
  // the one that names the current ones.
  .get('/', (c) => c.html(PAGE, 200, { ...SECURITY_HEADERS, 'cache-control': 'no-cache' }))
  .get('/assets/:file', async (c) => {
    const file = c.req.param('file');
    const type = TYPES.get(file);
    // Only this build's files: any other name is not looked for.
    if (type === undefined) return c.notFound();
    const body = await c.get('deps').staticAsset(file);
    if (!body) throw new Error(`openapi/assets has no ${file}: the package is incomplete.`);
    return c.body(body, 200, {
      'content-type': type,
      'cache-control': 'public, max-age=31536000, immutable',
      'x-content-type-options': 'nosniff',
    });
  });
