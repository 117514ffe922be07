/**
 * The reference page's script: Scalar's standalone browser bundle (MIT), an exact version, kept in
 * openapi/assets (`npm run docs:script` writes it from the npm registry and checks it against
 * `integrity`) and served by the gateway itself (GET /docs/<file>), so that /docs needs no other
 * host. The version is in the file's name: a new version is a new URL, which lets the answer be
 * cached for good.
 */
export const DOCS_SCRIPT = {
  package: '@scalar/api-reference',
  version: '1.76.0',
  /** The file inside the package. */
  source: 'dist/browser/standalone.js',
  /** Its name in openapi/assets, and under /docs/. */
  file: 'scalar-api-reference-1.76.0.js',
  /** Subresource Integrity: the browser runs the script only if its bytes hash to this. */
  integrity: 'sha384-oH1C0RwqcwbVXkC+r8A+4qRoyEUQdtxAzOwumkxZtQBBcsy61FOoPt7B50OVJYYQ',
} as const;

/**
 * GET /docs: an interactive reference over GET /openapi.json. The text in #about is plain HTML,
 * shown while the script loads and where it never runs (scripts off, or the script refused for its
 * integrity); it is hidden once the reference is mounted. Scalar's options keep the page to the
 * reference: no fonts from Scalar's servers, no telemetry, no agent or developer tools (which offer
 * Scalar's hosted services); every resource's operations listed at once.
 */
export const DOCS_PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Assistants gateway API</title>
<style>#about { max-width: 40rem; margin: 2rem auto; padding: 0 1rem; font: 16px/1.5 system-ui, sans-serif; }</style>
<noscript><style>#loading { display: none; }</style></noscript>
</head>
<body>
<main id="about">
<h1>Assistants gateway API</h1>
<p>This gateway serves OpenAI's Assistants v2 API (assistants, threads, messages, runs, run steps, files and
vector stores) over any Chat Completions provider, with virtual keys and rate-limit policies. Its routes
are under <code>/v1</code>; authenticate with a gateway API key as <code>Authorization: Bearer gk_…</code>.</p>
<p>The API's description: <a href="/openapi.json">/openapi.json</a> (OpenAPI 3.1), for a client generator
or any OpenAPI viewer. How to run and use the gateway: the project's README and its <code>docs/</code> folder.</p>
<noscript><p>The interactive reference on this page needs JavaScript.</p></noscript>
<p id="loading">Loading the interactive reference…</p>
</main>
<div id="reference"></div>
<script src="/docs/${DOCS_SCRIPT.file}" integrity="${DOCS_SCRIPT.integrity}" crossorigin="anonymous"></script>
<script>
if (window.Scalar) {
  Scalar.createApiReference('#reference', {
    url: '/openapi.json',
    withDefaultFonts: false,
    telemetry: false,
    agent: { disabled: true },
    showDeveloperTools: 'never',
    defaultOpenAllTags: true,
  });
  document.getElementById('about').hidden = true;
} else {
  document.getElementById('loading').textContent = 'The interactive reference could not be loaded: /openapi.json is the description.';
}
</script>
</body>
</html>
`;
