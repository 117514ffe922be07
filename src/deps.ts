import type { Config } from './config';
import type { Db } from './db/client';
import type { FairShares } from './lib/fair-shares';
import type { BlobStore } from './lib/blob-store';
import type { SecretBox } from './lib/secrets';
import type { Slices } from './lib/slices';
import type { Logger } from './logger';
import type { IngestionHost } from './retrieval/host';
import type { parseMultipart } from 'multitars';
import type { HtmlToText } from './retrieval/file-text';
import type { CounterStore } from './ratelimit/counter-store';
import type { UpstreamFetch } from './providers/types';
import type { ModelLists } from './providers/models';
import type { PolicyCache } from './ratelimit/policy-cache';
import type { RequestContext } from './actor';
import type { History, ResponseRow, RunRow, StepRow, VirtualKey } from './db/schema';
import type { Prompt } from './providers/types';
import type { UpstreamUrlJudgements } from './lib/upstream-url';
import type { SettingsCache } from './db/settings-cache';
import type { Sandbox } from './sandbox/sandbox';
import type { Metrics } from './metrics/gateway';

/**
 * Everything runtime-specific, built once per process (runtime/node/deps.ts) or isolate (runtime/workers/deps.ts)
 * and handed to createApp. App code reaches these only through here, never through globals of a
 * runtime. Functions take the part they need (`Pick<Deps, 'db' | 'now'>`).
 */
export interface Deps {
  db: Db;
  config: Config;
  log: Logger;
  /** Encrypts and decrypts provider secrets under GATEWAY_ENCRYPTION_KEY. */
  secrets: SecretBox;
  /** How upstream providers are called: Node's pooled client, Workers' fetch (tests may hand in a fake's handler). */
  fetch: UpstreamFetch;
  /**
   * The shares of provider calls, per workspace and in all, that runs take turns for
   * (GATEWAY_UPSTREAM_CALLS…): one per process on Node, per isolate on Workers.
   */
  upstreamShares: FairShares;
  /**
   * What GET /metrics writes (metrics/gateway.ts): the process's figures on Node; on Workers the
   * isolate's, handed to one object that adds every isolate's up (runtime/workers/metrics.ts).
   */
  metrics: Metrics;
  /** Rate-limit counters (ratelimit/counter-store.ts): libSQL by default. */
  counters: CounterStore;
  /** The active rate-limit policies per workspace, cached and indexed for matching. */
  policyCache: PolicyCache;
  /** API keys, assistants and virtual keys, kept while the database's settings do not change. */
  settings: SettingsCache;
  /** Milliseconds since the epoch. Tests move it to cross rate-limit windows and run expiry. */
  now: () => number;
  /**
   * How runs executing side by side share the event loop (lib/slices.ts): in slices on Node, where
   * one process executes every run; not at all on Workers, where each run has its executor object.
   */
  slices: Slices;
  /**
   * A request's body, read once (http/middleware/json-body.ts): the Request's own stream, or on Node the
   * HTTP server's message underneath it (runtime/node/request-body.ts), which costs far less to read.
   */
  requestBody: (request: Request) => AsyncIterable<Uint8Array> | null;
  /** Where runs execute (RunHost, below): in this process on Node, in Durable Objects on Workers. */
  runHost: RunHost;
  /**
   * The events of a response's stream (resources/responses/events.ts), translated from the run
   * engine's as it sends them: given to the engine here, which the responses resource is built on.
   * A promise: on Node the translation is a chunk loaded with the first response streamed (or with
   * the Responses routes), which a process serving only runs never holds. A load that fails ends that
   * stream as any failure of the engine does (an `error` event), and the next response loads again.
   */
  responseEvents: (target: EventSink, run: RunRow, response: ResponseRow) => Promise<EventSink>;
  /**
   * The runs executing where this app runs, so that a cancel reaching them stops them at once
   * (resources/runs/execution/executions.ts).
   */
  executions: Executions;
  /** Which URLs may be upstreams, judged once per URL's text (lib/upstream-url.ts). */
  upstreamUrls: UpstreamUrlJudgements;
  /** Providers' model lists, kept a short while per virtual key (providers/models.ts, GET /v1/models). */
  modelLists: ModelLists;
  /** Uploaded files' bytes (resources/files/blob-store.ts): a directory under DATA_DIR on Node, R2 on Workers. */
  blobs: BlobStore;
  /**
   * code_interpreter's sandbox (sandbox/sandbox.ts): on Node the local one when bubblewrap and Python
   * are there, else the remote one at GATEWAY_SANDBOX_URL (Workers' only choice), else one whose
   * `availability()` says why there is none (sandbox/configured.ts).
   */
  sandbox: Sandbox;
  /**
   * Where files added to vector stores are ingested (retrieval/host.ts): in process on Node; on Workers,
   * by the ingest Worker, told through a Queue (null without its binding).
   */
  ingestion: IngestionHost | null;
  /**
   * The OpenAPI document that GET /openapi.json serves (http/openapi/assets/openapi.json, generated by
   * `npm run openapi`): read from the package's files on Node when asked for (not held); on Workers read from the Worker's static assets, so that
   * the script does not carry it.
   */
  openApiDocument: () => Promise<object>;
  /**
   * A file of openapi/assets (the reference page's script, the console's files), as a stream, or null when there is none:
   * read from the package's files on Node, from the Worker's static assets on Workers.
   */
  staticAsset: (name: string) => Promise<ReadableStream<Uint8Array> | null>;
  /** Libraries that few requests use, loaded when first asked for (Libraries, below). */
  libraries: Libraries;
}

/**
 * Libraries that only some requests use, loaded when first asked for: imported on Node; on Workers
 * modules of the Worker's own beside its script (src/worker-modules.ts, runtime/workers/lazy/), so
 * that the script, which every cold start compiles, does not carry them.
 */
export interface Libraries {
  /** html-to-text, for a message's HTML file (retrieval/file-text.ts). */
  htmlToText: HtmlToText;
  /** multitars, for an upload's multipart body (resources/files/upload.ts). */
  multipart: () => Promise<{ parseMultipart: typeof parseMultipart }>;
}

/**
 * The executions an app runs where it runs (a Node process, a Workers isolate), each with what stops
 * it: one per app, so that apps side by side in one process, as tests build them, never stop each
 * other's runs. Implemented by the run engine (resources/runs/execution/executions.ts).
 */
export interface Executions {
  add(runId: string, abort: AbortController): void;
  /** Forgets the execution that `abort` stops: not a later turn of the run that has already begun. */
  remove(runId: string, abort: AbortController): void;
  /** Stops the run if it executes here. */
  cancel(runId: string): void;
}

/**
 * Where runs execute: the one thing the two runtimes do differently with a run. Node executes it
 * in its own process (runtime/node/run-host.ts); Workers hand it to the run's executor object, since a
 * Worker's `waitUntil` ends 30 seconds after its response (runtime/workers/run-host.ts). Either way the
 * execution does not belong to the request: a client that disconnects does not stop it.
 *
 * The caller has already put the run in progress (created it, or accepted its tool outputs), so
 * the host owns it from here: resources/runs/execution/engine.ts executes it, resources/runs/execution/settle.ts ends it.
 * Declared here, with the options it is handed, because Deps carries it.
 */
export interface RunHost {
  /** Executes the run in the background; its answer (the queued run) has gone out already. */
  start(run: RunRow, options: StartOptions, context: RequestContext): void;
  /**
   * Executes the run into its event stream, `leading` first: the response's body. `written` is
   * the commit of the run's rows when it is still under way: a host may start the run's upstream
   * call meanwhile (the first token comes sooner by a commit), but sends and writes nothing until
   * it has succeeded, and drops the execution, without a trace, if it fails. The caller answers
   * with the stream only once the commit succeeded.
   */
  stream(
    run: RunRow,
    options: StreamOptions,
    context: RequestContext,
    written?: Promise<unknown>,
  ): Promise<ReadableStream<Uint8Array>>;
  /**
   * Executes the run and answers once its turn has ended and its outcome is written, for a caller
   * that answers with the run as it ended (a response created neither streamed nor in the
   * background): no event is built. `written` as for `stream`; the caller awaits it too, for its
   * failure. `answered` is told as a stream's is, before the run's end is answered.
   */
  execute(
    run: RunRow,
    options: StartOptions & Pick<StreamOptions, 'answered'>,
    context: RequestContext,
    written?: Promise<unknown>,
  ): Promise<void>;
  /**
   * Stops a run just marked `cancelling`, at once, where it executes. Wherever this does not
   * reach, the run's lease renewal notices the cancel, within a third of the lease.
   */
  cancel(runId: string, context: RequestContext): void;
}

/**
 * What the caller of a run's turn already holds, to spare the turn's database reads: the use-case
 * that created the run, or took its tool outputs, resolved the virtual key and built the prompt (it
 * sized the turn's token reservation by it).
 */
export interface Preloaded {
  virtualKey: VirtualKey;
  prompt: Prompt;
  /** A later turn's: the run's steps so far, as its write leaves them (a first turn has none). */
  steps?: StepRow[];
}

export interface StartOptions {
  preloaded?: Preloaded;
}

export interface StreamOptions extends StartOptions {
  /** Events the stream opens with, before the run's `in_progress` (thread.created, …). */
  leading?: ServerSentEvent[];
  /** Whether file search steps show their results' content (`include[]` on run create). */
  includeResultContent?: boolean;
  /** For a response executed as the run: its row, whose events are the Responses API's (responseEvents). */
  response?: ResponseRow;
  /**
   * Told once, where the run executes, when its turn has ended: before the client is sent the
   * event that ends the run, so that a turn's next request finds what it answered. See Answered.
   */
  answered?: Answered;
}

/**
 * How a run settled, handed back to the request that started its turn (StreamOptions.answered: its
 * creation, or the submission of its tool outputs), when it ended `completed` (a response, also on
 * calls of the client's functions, their outputs still to come): what the turn wrote, as stored
 * (ids, order, content): its messages, and its steps (its tool-calls steps, the gateway's tools
 * answered in its rounds or the client's functions, and its messages' creations, which place the
 * calls among the messages). Its thread's history is then the one its prompt was built from and
 * these. Null when it ended otherwise (a run
 * waiting for outputs, failed, cancelled, incomplete), or its answer or calls were more than a
 * thread's known history holds (threads/known-histories.ts, MAX_BYTES). On Workers the run executes in another
 * object, which calls this back over RPC once (runtime/workers/run-executor.ts): no JavaScript runs
 * for the chunks of its stream in the request's isolate.
 */
export type Answered = (answer: History | null) => void | Promise<void>;

/**
 * One event of a run's stream (resources/runs/execution/event-stream.ts): its name and its data, an object to serialise, or JSON already serialised: a string,
 * or TextParts for a long one (a message of a long answer, jsonWithText), written part by part.
 */
export type ServerSentEvent = [name: string, data: unknown];

/** Receives a run's events. The engine emits through this; a non-streamed run has none. */
export interface EventSink {
  /**
   * Sends events together, as one chunk on the wire: every write costs a syscall here and a read on
   * the client, so events that happen together (a message opening with its first delta, an
   * ending) travel together.
   */
  send(events: ServerSentEvent[]): Promise<void>;
}
