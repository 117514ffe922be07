/**
 * The layers of src/ and the one rule over them: a module imports only from its own layer or the
 * layers below it, type-only imports included. `npm run check:layers` checks it.
 *
 * The order is what the code says: providers speak only to upstreams (lib below them), the tables'
 * column types use the providers' vocabulary (usage, provider kinds), rate limiting and retrieval
 * read the database, `deps.ts` is the composition's type (the ports of every part below it), the
 * HTTP plumbing hands a request its deps, and resources build on all of them. Above them, the app
 * mounts the resources' routes, each runtime builds the deps and hosts the app, the CLI administers
 * the database, and the entries start one of them (node.ts prints what the CLI formats).
 */
const LAYERS = [
  // lib is the bottom: it imports nothing of src outside lib.
  { name: 'lib', path: '^src/lib/', why: 'helpers and ports that know nothing of the gateway' },
  {
    name: 'metrics',
    path: '^src/metrics/',
    why: "the metrics' registry and the gateway's metrics, recorded from every layer",
  },
  {
    name: 'foundations',
    path: '^src/(config|errors|logger)\\.ts$',
    why: 'the environment, the error envelope, the log',
  },
  { name: 'providers', path: '^src/providers/', why: 'the upstream kinds and their calls' },
  {
    name: 'sandbox',
    path: '^src/sandbox/',
    why: "code_interpreter's sandbox: the port, its limits, its HTTP protocol and client",
  },
  { name: 'db', path: '^src/db/', why: 'the tables, their column types, the client' },
  { name: 'ratelimit', path: '^src/ratelimit/', why: 'the policy vocabulary, matching, counters, enforcement' },
  { name: 'retrieval', path: '^src/retrieval/', why: 'chunking, embedding, indexing and searching files' },
  { name: 'deps', path: '^src/deps\\.ts$', why: 'the composition: the ports of everything below' },
  { name: 'http', path: '^src/http/', why: 'middleware, envs, shared request schemas, OpenAPI' },
  {
    name: 'resources',
    path: '^src/resources/',
    why: 'one folder per resource: routes, schemas, wire, queries, use-cases',
  },
  { name: 'app', path: '^src/app\\.ts$', why: 'createApp: middleware order and the mounted routes' },
  {
    name: 'runtime',
    // worker-modules.ts is the Worker's, at the root of src/ for its imports' sake (its comment says why).
    path: '^src/(runtime/|worker-modules\\.ts$)',
    why: 'what Node and Workers each build and host',
  },
  { name: 'cli', path: '^src/cli/', why: 'the admin command line' },
  { name: 'entries', path: '^src/(node|worker|ingest-worker)\\.ts$', why: 'thin starts of a runtime' },
];

/**
 * Which resource may use which: what the domain says, and nothing that would close a cycle.
 * Identities (organisations, workspaces, API keys, quotas) are who calls; virtual keys are the
 * upstreams a workspace calls with; policies and usage are counted per workspace; files are
 * uploaded with a key and fetched (image URLs) under its upstream rules; a vector store holds
 * files and embeds with a virtual key; assistants and threads name vector stores and files in
 * their tool resources; a run executes an assistant on a thread, with its virtual key, under
 * the workspace's policies; the calls passed through to a provider (chat completions, completions,
 * embeddings, moderations) share one pipeline, which resolves their virtual key; the models are
 * what the virtual keys serve; a conversation is a thread, whose items are its messages and its
 * runs' tool calls (the responses use conversations, never the other way round).
 */
const RESOURCES = {
  identities: [],
  'virtual-keys': ['identities'],
  policies: ['identities'],
  usage: ['identities'],
  metrics: ['identities'],
  files: ['identities', 'virtual-keys'],
  'vector-stores': ['identities', 'virtual-keys', 'files'],
  assistants: ['identities', 'virtual-keys', 'files', 'vector-stores'],
  threads: ['identities', 'virtual-keys', 'files', 'vector-stores'],
  'pass-through': ['identities', 'virtual-keys'],
  'chat-completions': ['identities', 'pass-through'],
  completions: ['identities', 'pass-through'],
  embeddings: ['identities', 'pass-through'],
  moderations: ['identities', 'pass-through'],
  models: ['identities', 'virtual-keys'],
  runs: ['identities', 'virtual-keys', 'policies', 'usage', 'files', 'vector-stores', 'assistants', 'threads'],
  conversations: ['identities', 'files', 'vector-stores', 'threads'],
  responses: [
    'identities',
    'virtual-keys',
    'policies',
    'usage',
    'files',
    'vector-stores',
    'assistants',
    'threads',
    'runs',
    'conversations',
  ],
};

const upward = LAYERS.slice(0, -1).map((layer, index) => ({
  name: `layer-${layer.name}`,
  severity: 'error',
  comment: `${layer.name} (${layer.why}) imports only from itself and below: not from ${LAYERS.slice(index + 1)
    .map((above) => above.name)
    .join(', ')}.`,
  from: { path: layer.path },
  to: { path: LAYERS.slice(index + 1).map((above) => above.path) },
}));

const resourceNames = Object.keys(RESOURCES);
const acrossResources = resourceNames.map((name) => ({
  name: `resource-${name}`,
  severity: 'error',
  comment: `resources/${name} uses only ${RESOURCES[name].length === 0 ? 'no other resource' : RESOURCES[name].join(', ')} (RESOURCES in .dependency-cruiser.cjs).`,
  from: { path: `^src/resources/${name}/` },
  to: {
    path: `^src/resources/(${resourceNames
      .filter((other) => other !== name && !RESOURCES[name].includes(other))
      .join('|')})/`,
  },
}));

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-cycles',
      severity: 'error',
      comment: 'No import cycles, type-only imports included.',
      from: {},
      to: { circular: true },
    },
    ...upward,
    ...acrossResources,
    {
      name: 'runtimes-apart',
      severity: 'error',
      comment: 'Node and Workers each build their own deps: neither runtime imports the other.',
      from: { path: '^src/runtime/(node|workers)/' },
      to: { path: '^src/runtime/(node|workers)/', pathNot: '^src/runtime/$1/' },
    },
    {
      name: 'no-unresolvable',
      severity: 'error',
      comment:
        "Every import resolves (but the Workers runtime's own modules): a rule cannot check what it cannot find.",
      from: {},
      to: { couldNotResolve: true, pathNot: '^cloudflare:' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    // The reference page's bundled script (a vendored file, served as it is).
    exclude: { path: '^src/http/openapi/assets/' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
    },
    reporterOptions: { text: { highlightFocused: true } },
  },
};
