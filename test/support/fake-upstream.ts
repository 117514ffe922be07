/**
 * A fake OpenAI Chat Completions server: the stand-in for every real provider (OpenAI, Azure
 * OpenAI, vLLM, Ollama...) in tests, benchmarks and the demo. It answers streamed requests (what
 * runs send) and non-streamed ones (a `chat.completion`, what a passed-through chat completion may
 * ask), records each request's body (`requests`: what a test asserts was passed on), and follows the real wire format closely, including the
 * details that trip up clients: the role-only first delta, `usage: null` on
 * every chunk when usage is requested, the `choices: []` usage chunk, Azure's leading prompt-filter
 * chunk with no choices, tool-call arguments split over several deltas.
 *
 * What to answer is chosen per request, without shared memory, so that a gateway in another process
 * or in workerd can be driven too:
 *   1. a `#fake {json}` line in the last user message (a scenario, or an array of scenarios, one per
 *      model turn since that user message: `[{"tool_calls":1},{"reply":"Done"}]`);
 *   2. otherwise the next scenario queued with `enqueue()` (in-process tests);
 *   3. otherwise the default scenario, otherwise the built-in reply ("You said: ..." echoing the last
 *      user message, or "The tool returned: ..." when tool outputs are being submitted); given the
 *      gateway's `file_search` function (a run with the file_search tool), the built-in answer
 *      first calls it with the user's message as the query.
 * docs/fake-provider.md documents all of this for users.
 *
 * Token counts are deterministic (see `countTokens`, `promptTokens`, `completionTokens`).
 *
 * Gates hold answers until a test says so, rather than for a time (a winner held open while its
 * racers are answered, however slowly a loaded machine serves them): a scenario's `hold` names a
 * gate, and the answer waits before its status line until the gate opens. A gate is opened in
 * process with `openGate(name)`, and from anywhere else (another process, workerd) over HTTP with
 * `remoteGate(url, name)` (test/support/gates.ts): `POST /fake/gates/{name}/open`, read with
 * `GET /fake/gates/{name}`, both answering `{name, open, waiting, passed}`. These control requests
 * are not provider traffic: they are not recorded, counted in flight or checked for the API key.
 *
 * The core (`createFakeUpstream`) uses Web APIs only, so it can also run inside workerd;
 * `startFakeUpstream` adds a node:http server, loaded lazily for that reason.
 *
 * Run as a script: `tsx test/support/fake-upstream.ts [--port N] [--host H] [--api-key K]` prints
 * the server's URL on stdout and serves until SIGINT/SIGTERM.
 *
 * Over HTTP, how the request's body is read is chosen by the path, since the directive is in the
 * body (a virtual key's base_url carries it): `/unread/v1/chat/completions` never reads the body
 * nor answers, holding the connection until the client leaves (a provider that reads not at all);
 * `/slow-read/<bytes per second>/v1/...` reads it at that rate, then answers as usual.
 */
import { defined } from './defined';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { GATE_NAME, type GateState } from './gates';

// ---------------------------------------------------------------------------------------------
// Public types

/** One tool call the fake model makes. */
export interface FakeToolCall {
  /** Function to call. Default: the request's function tools in turn (call i uses tool i mod n). */
  name?: string;
  /**
   * A string is sent verbatim (so invalid JSON can be tested); an object is JSON-encoded.
   * Default: an example built from the tool's JSON schema (its required properties).
   */
  arguments?: string | Record<string, unknown>;
  /** Default: `call_` and 24 random characters. */
  id?: string;
}

export interface FakeUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/**
 * What the fake answers to one request. Every field is optional; `{}` is the built-in reply.
 * "Chunks" are the `data:` events of a streamed answer, counted from 1 and including the role
 * chunk, the finish chunk, the usage chunk and Azure's prompt-filter chunk, but not `[DONE]`.
 * An `*_after_chunks` value at or beyond the number of chunks fires just before `[DONE]`.
 */
export interface FakeScenario {
  /** The assistant's text. Default: the built-in reply (none when tool calls are made). */
  reply?: string;
  /**
   * What the model reasons before its answer, streamed first a word a chunk in `reasoning_field`
   * (as DeepSeek, vLLM and Ollama send it), counted in the completion tokens and their
   * `reasoning_tokens`. Default: none.
   */
  reasoning?: string;
  /** The delta's field for `reasoning`: `reasoning_content` (default, DeepSeek's) or `reasoning` (vLLM's, Ollama's). */
  reasoning_field?: 'reasoning_content' | 'reasoning';
  /**
   * Answer with the request's `messages` as JSON instead of `reply`: what the gateway sent, for a
   * test that cannot read this fake's records (a gateway in workerd or in another process).
   */
  echo_messages?: boolean;
  /** Tokens (words) per streamed content chunk. Default 1. */
  chunk_tokens?: number;
  /** Split the content into this many chunks instead of `chunk_tokens` words each. */
  chunks?: number;
  /**
   * Answer with this many bytes of generated ASCII words instead of `reply`, produced chunk by
   * chunk and never held whole (memory benchmarks).
   */
  stream_bytes?: number;
  /** Bytes per generated chunk with `stream_bytes`. Default 1024. */
  chunk_bytes?: number;
  /** Tool calls to make: a list, `true` for one, or a count (parallel calls over the request's tools). */
  tool_calls?: FakeToolCall[] | boolean | number;
  /** Characters per streamed tool-argument fragment. Default 8 (`ARGUMENT_CHUNK_CHARS`). */
  argument_chunk_chars?: number;
  /** Overrides the finish reason (`stop`, `length`, `tool_calls`, `content_filter`...); the content is not cut. */
  finish_reason?: string;
  /**
   * Overrides some usage numbers; `total_tokens` defaults to the sum of the other two. Any JSON
   * value is sent as given (`-1e9`, `"01e4"`, `{}`), so that a gateway's checks can be tested.
   */
  usage?: { [K in keyof FakeUsage]?: unknown };
  /** The `model` reported back. Default: the request's model (Azure deployments: the deployment). */
  model?: string;
  /**
   * The completion's `id`, any JSON value (a provider that repeats one, or sends one no path could
   * hold). Default: `chatcmpl-` and 29 random characters, as OpenAI's.
   */
  completion_id?: unknown;
  /** Delay before the status line and headers. */
  first_byte_delay_ms?: number;
  /**
   * Hold the answer, before the status line and before `first_byte_delay_ms`, until the gate of
   * this name is open (see the header). A gate stays open once opened, so an opening that comes
   * before the request is not lost; a client that leaves meanwhile ends the exchange `cancelled`.
   * Names are letters, digits and `._:-` (1 to 100); a test takes a fresh one, so that tests
   * sharing a fake never open each other's.
   */
  hold?: string;
  /** Delay between two streamed chunks. */
  chunk_delay_ms?: number;
  /** Answer with this HTTP status and an error body like the real API's (500, 429, 503, 400...). */
  status?: number;
  /** Seconds for the `retry-after` header: always sent on 429 (default 1), on other statuses when set. */
  retry_after?: number;
  /** The error body to send verbatim instead of the default one; implies status 500 unless `status` is set. */
  error?: unknown;
  /** Extra response headers. */
  headers?: Record<string, string>;
  /** Stop sending after N chunks and hold the connection open until the client gives up or the server closes. */
  stall_after_chunks?: number;
  /**
   * Send the whole answer and `[DONE]`, then hold the connection open (the body never ends) until
   * the client gives up or the server closes: a provider that finishes its stream late or never.
   */
  stall_after_done?: boolean;
  /** Drop the connection after N chunks, without the end of the chunked body and without `[DONE]`. */
  cut_after_chunks?: number;
  /** Send `data: {not json` after N chunks, then carry on. */
  malformed_after_chunks?: number;
  /** Send `data: {"error":{...server_error...}}` after N chunks and end the body, as OpenAI does when a stream fails. */
  error_after_chunks?: number;
  /** The body `error_after_chunks` sends instead of the server_error one (an upstream that repeats a key, say). */
  stream_error?: unknown;
  /**
   * Send the whole event stream in one write, as a buffering proxy does: the gateway reads every
   * chunk at once, a fault (`error_after_chunks`, `malformed_after_chunks`) with the answer before it.
   */
  one_write?: boolean;

  // Hostile upstreams: what a server under a tenant's control could send instead of an answer.

  /**
   * The `index` of every tool-call delta instead of the call's position, any JSON value
   * (`4294967294`, `-1`, `1.5`, `"abc"`, `"__proto__"`); `null` leaves `index` out.
   */
  tool_call_index?: unknown;
  /**
   * Each tool call's arguments are this many bytes of generated words instead of `arguments`,
   * produced fragment by fragment (`argument_chunk_chars` each) and never held whole.
   */
  tool_argument_bytes?: number;
  /**
   * Before the answer, this text repeated, as raw event-stream bytes (`\n`, `: ping\n\n`,
   * `data: xxx` without an end of line, tiny events), in writes of `chunk_bytes` (default: the
   * text once) with `chunk_delay_ms` between them; `flood_bytes` in all, endless without it.
   */
  flood?: string;
  /** How many bytes of `flood` to send before the answer. Default: endless. */
  flood_bytes?: number;
  /**
   * Answer with an error (`status`, default 500) whose body is gzip-encoded and inflates to this
   * many bytes: a small body that is a bomb for a reader without a bound.
   */
  gzip_error_bytes?: number;

  // Turn bounds (issue 34, F4): tool-call arguments shaped as the gateway's file_search function takes them.

  /**
   * Each tool call's arguments are `{"queries":[…]}` with `count` generated queries of `bytes`
   * bytes each (the file_search function's shape), produced fragment by fragment
   * (`argument_chunk_chars` each) and never held whole.
   */
  tool_argument_queries?: { count: number; bytes: number };
}

export interface FakeUpstreamOptions {
  /** When set, requests must carry it (`Authorization: Bearer`, or `api-key` on Azure paths). */
  apiKey?: string;
  /** The scenario for requests with no directive and nothing queued. Default: the built-in reply. */
  defaultScenario?: FakeScenario;
  /**
   * Whether every request is kept in `requests` (default true). The fake in a process of its own
   * keeps none: it serves tens of thousands of requests that no test reads back, and kept, they grew
   * its heap until its collections held it for seconds (the load suite's runs then failed "no first
   * byte within 3000 ms" by the dozen, late in its minute).
   */
  record?: boolean;
  /**
   * The models `GET /v1/models` lists (default FAKE_MODELS); null: it answers 500, as a provider
   * whose list fails.
   */
  models?: readonly string[] | null;
  /** Endpoints it does not have, answered 404 as OpenAI answers an unknown path (a provider without moderations). */
  without?: readonly Operation[];
}

/** The models the fake lists when told none. */
export const FAKE_MODELS = ['gpt-4o', 'gpt-4o-mini', 'text-embedding-3-small', 'omni-moderation-latest'] as const;

/** How a request's exchange ended; `closed` means `abortAll()` or the server's `close()` ended it. */
export type RequestOutcome = 'open' | 'completed' | 'cancelled' | 'cut' | 'closed';

export interface RecordedRequest {
  method: string;
  path: string;
  query: Record<string, string>;
  /** Header names lower-cased. */
  headers: Record<string, string>;
  /** The parsed JSON body (loosely typed, for assertions); undefined when absent or not JSON. */
  body: Record<string, any> | undefined;
  rawBody: string;
  /** Date.now() when the request arrived. */
  receivedAt: number;
  stream: boolean;
  /** The scenario answered with, and where it came from (unset when the request was refused before). */
  scenario?: FakeScenario;
  scenarioSource?: 'directive' | 'queue' | 'default' | 'builtin';
  /** Updated live: `open` while the response body is still being sent (or stalled). */
  outcome: RequestOutcome;
}

// ---------------------------------------------------------------------------------------------
// Token rules, exported so tests compute the numbers the fake reports

/** Prompt tokens added per message on top of its words, like OpenAI's per-message framing. */
export const MESSAGE_OVERHEAD_TOKENS = 3;
/** Tool-call arguments are streamed in fragments of this many characters; each fragment is a token. */
export const ARGUMENT_CHUNK_CHARS = 8;

/** One token per whitespace-separated word. */
export function countTokens(text: string): number {
  return text.match(/\S+/g)?.length ?? 0;
}

/**
 * Prompt tokens: for every message, MESSAGE_OVERHEAD_TOKENS plus the words of its text (string
 * content, or the `text` of its text parts) and of its tool calls' names and arguments. Tools,
 * response formats and other parameters do not count.
 */
export function promptTokens(messages: readonly unknown[]): number {
  let total = 0;
  for (const message of messages) {
    total += MESSAGE_OVERHEAD_TOKENS + countTokens(messageText(message));
    const calls = isRecord(message) && Array.isArray(message.tool_calls) ? message.tool_calls : [];
    for (const call of calls) {
      const fn = isRecord(call) && isRecord(call.function) ? call.function : {};
      total += countTokens(`${str(fn.name)} ${str(fn.arguments)}`);
    }
  }
  return total;
}

/**
 * Completion tokens: the words of the content, plus for each tool call 1 (id and name) and one per
 * argument fragment of `argumentChunkChars` characters. A streamed answer spends exactly one token
 * per content chunk when chunk_tokens is 1 (the default).
 */
export function completionTokens(
  reply: string,
  toolCalls: readonly { arguments: string }[] = [],
  argumentChunkChars = ARGUMENT_CHUNK_CHARS,
): number {
  let total = countTokens(reply);
  for (const call of toolCalls) total += 1 + Math.ceil(call.arguments.length / argumentChunkChars);
  return total;
}

/** The directive line that selects `scenario` (one scenario, or one per model turn). */
export function fakeDirective(scenario: FakeScenario | FakeScenario[]): string {
  return `#fake ${JSON.stringify(scenario)}`;
}

/**
 * A run's new `thread`: one user message, which makes the fake answer with `scenario` (one per
 * model turn when an array) when there is one.
 */
export function fakeThread(text: string, scenario?: FakeScenario | FakeScenario[]) {
  return { messages: [{ role: 'user' as const, content: scenario ? `${text}\n${fakeDirective(scenario)}` : text }] };
}

/** The built-in reply to these messages (what the fake says when no scenario gives a reply). */
export function defaultReplyText(messages: readonly unknown[]): string {
  const turn = analyseTurn(messages);
  if (turn.toolOutputs.length > 0) return `The tool returned: ${turn.toolOutputs.join(' | ')}`;
  const words = turn.userText.replace(DIRECTIVE_LINES, '').match(/\S+/g) ?? [];
  return words.length > 0 ? `You said: ${words.slice(0, 20).join(' ')}` : 'Hello! This is the fake upstream.';
}

// ---------------------------------------------------------------------------------------------
// The fake

const STALL = Symbol('stall');
const CUT = Symbol('cut');
type Piece = string | typeof STALL | typeof CUT;

export function createFakeUpstream(options: FakeUpstreamOptions = {}): FakeUpstream {
  return new FakeUpstream(options);
}

export class FakeUpstream {
  /** Every request received, oldest first (cleared in place by `reset()`; none with `record: false`). */
  readonly requests: RecordedRequest[] = [];
  readonly #apiKey: string | undefined;
  readonly #initialDefault: FakeScenario | undefined;
  readonly #record: boolean;
  readonly #models: readonly string[] | null;
  readonly #without: ReadonlySet<Operation>;
  #default: FakeScenario | undefined;
  readonly #queue: FakeScenario[] = [];
  #inFlight = 0;
  /** Ends every open response body, for abortAll() and close(). */
  readonly #openBodies = new Set<() => void>();
  /** Gates by name, each with the requests it holds (their go-ahead), made when first named. */
  readonly #gates = new Map<string, { open: boolean; held: Set<() => void>; passed: number }>();

  constructor(options: FakeUpstreamOptions = {}) {
    this.#apiKey = options.apiKey;
    this.#initialDefault = options.defaultScenario && validateScenario(options.defaultScenario, 'defaultScenario');
    this.#default = this.#initialDefault;
    this.#record = options.record ?? true;
    this.#models = options.models === undefined ? FAKE_MODELS : options.models;
    this.#without = new Set(options.without ?? []);
  }

  /** Requests received whose response body is not finished, cancelled or cut yet (a stalled stream counts). */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** Queues one-shot scenarios, used in order by the next requests that carry no directive. */
  enqueue(...scenarios: FakeScenario[]): void {
    for (const scenario of scenarios) this.#queue.push(validateScenario(scenario, 'enqueue()'));
  }

  /** Sets the scenario used when there is no directive and nothing queued; undefined restores the built-in reply. */
  setDefault(scenario: FakeScenario | undefined): void {
    this.#default = scenario && validateScenario(scenario, 'setDefault()');
  }

  /** Clears the recording and the queue and restores the default scenario given at creation. */
  reset(): void {
    this.requests.length = 0;
    this.#queue.length = 0;
    this.#default = this.#initialDefault;
  }

  /** Ends every open response body with an error, as a dropped connection would (stalls included). */
  abortAll(): void {
    for (const end of [...this.#openBodies]) end();
  }

  /** Opens the gate `name`: the requests it holds go on, and those that come later pass straight through. */
  openGate(name: string): GateState {
    const gate = this.#gate(name);
    gate.open = true;
    for (const go of [...gate.held]) go();
    return this.gateState(name);
  }

  gateState(name: string): GateState {
    const gate = this.#gate(name);
    return { name, open: gate.open, waiting: gate.held.size, passed: gate.passed };
  }

  #gate(name: string) {
    if (!GATE_NAME.test(name)) throw new Error(`fake upstream: not a gate name: ${JSON.stringify(name)}`);
    let gate = this.#gates.get(name);
    if (!gate) this.#gates.set(name, (gate = { open: false, held: new Set(), passed: 0 }));
    return gate;
  }

  /** Resolves true once the gate `name` is open, or false as soon as the client leaves. */
  #pass(name: string, signal: AbortSignal): Promise<boolean> {
    const gate = this.#gate(name);
    return new Promise((resolve) => {
      const go = (): void => {
        gate.held.delete(go);
        signal.removeEventListener('abort', leave);
        gate.passed += 1;
        resolve(true);
      };
      const leave = (): void => {
        gate.held.delete(go);
        resolve(false);
      };
      if (gate.open) return go();
      if (signal.aborted) return resolve(false);
      gate.held.add(go);
      signal.addEventListener('abort', leave, { once: true });
    });
  }

  /** Answers the gate control requests (see the header), or undefined for any other request. */
  #gateControl(request: Request): Response | undefined {
    const [, name, open] = GATE_PATH.exec(new URL(request.url).pathname) ?? [];
    if (name === undefined) return undefined;
    if (!GATE_NAME.test(name)) return openAiError(400, `Not a gate name: ${name}`);
    if (open ? request.method !== 'POST' : request.method !== 'GET')
      return openAiError(405, `${request.method} is not served here`);
    return jsonResponse(200, open ? this.openGate(name) : this.gateState(name));
  }

  /** Resolves once no request is in flight; rejects after timeoutMs. */
  async waitForIdle(timeoutMs = 2000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (this.#inFlight > 0) {
      if (Date.now() > deadline)
        throw new Error(`fake upstream: ${this.#inFlight} request(s) still in flight after ${timeoutMs} ms`);
      await sleep(5);
    }
  }

  /** The Web-standard handler; same signature as the global fetch, so it can be injected as one. */
  readonly fetch = async (input: Request | string | URL, init?: RequestInit): Promise<Response> => {
    const request = input instanceof Request && init === undefined ? input : new Request(input, init);
    const control = this.#gateControl(request);
    if (control) return control;
    const receivedAt = Date.now();
    this.#inFlight += 1;
    let finished = false;
    const record: RecordedRequest = {
      method: request.method,
      path: '',
      query: {},
      headers: {},
      body: undefined,
      rawBody: '',
      receivedAt,
      stream: false,
      outcome: 'open',
    };
    const finish = (outcome: Exclude<RequestOutcome, 'open'>): void => {
      if (finished) return;
      finished = true;
      record.outcome = outcome;
      this.#inFlight -= 1;
    };
    try {
      const url = new URL(request.url);
      record.path = url.pathname;
      record.query = Object.fromEntries(url.searchParams);
      record.headers = Object.fromEntries(request.headers);
      record.rawBody = request.method === 'GET' || request.method === 'HEAD' ? '' : await request.text();
      if (this.#record) this.requests.push(record);
      const response = await this.#answer(request, url, record, finish);
      if (response.body === null || !isStreamed(response)) finish('completed');
      return response;
    } catch (error) {
      finish('completed');
      if (request.signal.aborted) throw error;
      // A bug in the fake: say so loudly rather than look like a provider fault.
      const message = `fake upstream failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`;
      return jsonResponse(500, { error: { message, type: 'fake_upstream_bug', param: null, code: null } });
    }
  };

  async #answer(
    request: Request,
    url: URL,
    record: RecordedRequest,
    finish: (outcome: Exclude<RequestOutcome, 'open'>) => void,
  ): Promise<Response> {
    const target = route(request.method, url.pathname);
    if (target === undefined || this.#without.has(target.operation)) {
      return url.pathname.startsWith('/openai/')
        ? jsonResponse(404, AZURE_NOT_FOUND)
        : openAiError(404, `Invalid URL (${request.method} ${url.pathname})`);
    }
    const azure = target.flavour === 'azure';
    if (target.deployment !== undefined && !url.searchParams.has('api-version'))
      return jsonResponse(404, AZURE_NOT_FOUND);

    if (this.#apiKey !== undefined) {
      const bearer = /^Bearer\s+(.+)$/i.exec(request.headers.get('authorization') ?? '')?.[1]?.trim();
      const provided = azure ? (request.headers.get('api-key') ?? bearer) : bearer;
      if (provided !== this.#apiKey) {
        if (azure) return jsonResponse(401, AZURE_UNAUTHORIZED);
        if (!provided) return openAiError(401, MISSING_KEY_MESSAGE);
        const message = `Incorrect API key provided: ${maskKey(provided)}. You can find your API key at https://platform.openai.com/account/api-keys.`;
        return openAiError(401, message, null, 'invalid_api_key');
      }
    }

    if (target.operation === 'models') return modelsAnswer(this.#models);
    let parsed: unknown;
    try {
      parsed = JSON.parse(record.rawBody);
    } catch {
      return openAiError(400, BAD_JSON_MESSAGE);
    }
    if (!isRecord(parsed)) return openAiError(400, BAD_JSON_MESSAGE);
    const body = parsed;
    record.body = body;
    record.stream = body.stream === true;
    // A moderation's model defaults (omni-moderation-latest); every other operation needs one.
    if (body.model === undefined && target.deployment === undefined && target.operation !== 'moderations')
      return openAiError(400, 'you must provide a model parameter');
    if (target.operation === 'embeddings') return embeddingsAnswer(body);
    if (target.operation === 'moderations') return moderationsAnswer(body);
    if (target.operation === 'completions') return legacyCompletionAnswer(body);
    if (!Array.isArray(body.messages))
      return openAiError(400, "Missing required parameter: 'messages'.", 'messages', 'missing_required_parameter');
    if (body.messages.length === 0) return openAiError(400, "[] is too short - 'messages'", 'messages');
    const messages: unknown[] = body.messages;
    // Real validations a gateway can trip over: OpenAI refuses these, so the fake must too.
    const hasTools = Array.isArray(body.tools) && body.tools.length > 0;
    for (const param of ['tool_choice', 'parallel_tool_calls']) {
      if (body[param] != null && !hasTools) {
        return openAiError(
          400,
          `Invalid value for '${param}': '${param}' is only allowed when 'tools' are specified.`,
          param,
        );
      }
    }
    const toolMessageError = checkToolMessages(messages);
    if (toolMessageError) return openAiError(400, toolMessageError.message, toolMessageError.param);

    let scenario: FakeScenario;
    let toolCalls: ToolCallPlan[];
    try {
      const turn = analyseTurn(messages);
      const steps = parseDirective(turn.userText);
      if (steps !== undefined && turn.step < steps.length) {
        scenario = defined(steps[turn.step]);
        record.scenarioSource = 'directive';
      } else if (this.#queue.length > 0) {
        scenario = defined(this.#queue.shift());
        record.scenarioSource = 'queue';
      } else {
        scenario = this.#default ?? {};
        record.scenarioSource = this.#default ? 'default' : 'builtin';
      }
      record.scenario = scenario;
      // The built-in answer searches when it can, as a model given file_search would.
      const search = record.scenarioSource === 'builtin' ? turn.userText.replace(DIRECTIVE_LINES, '').trim() : '';
      toolCalls = resolveToolCalls(scenario, body, turn.toolOutputs.length > 0, search);
    } catch (error) {
      if (error instanceof FakeRequestError)
        return openAiError(400, error.message, 'messages', 'invalid_fake_directive');
      throw error;
    }

    const held = scenario.hold === undefined || (await this.#pass(scenario.hold, request.signal));
    if (!held || (scenario.first_byte_delay_ms && !(await sleep(scenario.first_byte_delay_ms, request.signal)))) {
      finish('cancelled');
      return new Response(null, { status: 499 });
    }

    const extraHeaders = scenario.headers ?? {};
    const status = scenario.status ?? (scenario.error !== undefined ? 500 : 200);
    if (status < 200 || status >= 300) {
      const headers: Record<string, string> = { ...extraHeaders };
      if (status === 429 || scenario.retry_after !== undefined) {
        const seconds = scenario.retry_after ?? 1;
        headers['retry-after'] = String(seconds);
        if (azure) headers['retry-after-ms'] = String(Math.round(seconds * 1000));
      }
      if (status === 429) Object.assign(headers, RATE_LIMIT_HEADERS);
      if (scenario.gzip_error_bytes !== undefined) {
        const compressed = await gzipBomb(scenario.gzip_error_bytes);
        return new Response(compressed, {
          status,
          headers: {
            'content-type': 'application/json',
            'content-encoding': 'gzip',
            'content-length': String(compressed.length),
            ...headers,
          },
        });
      }
      const model = str(body.model) || target.deployment || 'gpt-4o';
      const apiVersion = url.searchParams.get('api-version') ?? 'v1';
      return jsonResponse(
        status,
        scenario.error ?? defaultErrorBody(status, azure, model, scenario.retry_after ?? 1, apiVersion),
        headers,
      );
    }

    const plan = makePlan(scenario, body, messages, toolCalls, target);
    if (!record.stream)
      return jsonResponse(200, completionObject(plan), { 'x-request-id': `req_${randomId(32)}`, ...extraHeaders });
    const frames = (signal: AbortSignal) =>
      scenario.one_write ? inOneWrite(sseFrames(plan, signal)) : sseFrames(plan, signal);
    const sse = bodyStream(frames, finish, request.signal, this.#openBodies);
    return streamedResponse(sse, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      ...extraHeaders,
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Embeddings

/** Dimensions of the fake's vectors when the request asks for none (text-embedding-3-small's are 1536). */
export const FAKE_EMBEDDING_DIMENSIONS = 256;
/** A text containing this, followed by an HTTP status, makes the whole embeddings call fail with it. */
export const FAKE_EMBEDDINGS_STATUS = '#fake-embeddings-status';

/**
 * `/v1/embeddings`, deterministic: a text's vector is its bag of words (lower-cased, letters and
 * digits), each word hashed to a dimension and a sign, normalised. Texts sharing words are close
 * (cosine similarity grows with the words in common), unrelated texts nearly orthogonal, so that
 * retrieval can be tested for the right chunk. Usage: one token per word, as for chat.
 */
export function embeddingsAnswer(body: Record<string, unknown>): Response {
  const input = typeof body.input === 'string' ? [body.input] : body.input;
  if (!Array.isArray(input) || input.length === 0 || !input.every((text) => typeof text === 'string')) {
    return openAiError(400, "'input' must be a non-empty string or array of strings", 'input');
  }
  if (input.length > 2048) return openAiError(400, `'input' has ${input.length} items; at most 2048`, 'input');
  const dimensions = body.dimensions ?? FAKE_EMBEDDING_DIMENSIONS;
  if (typeof dimensions !== 'number' || !Number.isInteger(dimensions) || dimensions < 1 || dimensions > 3072) {
    return openAiError(400, 'Invalid dimensions', 'dimensions');
  }
  const failing = input.map((text) => new RegExp(`${FAKE_EMBEDDINGS_STATUS} (\\d{3})`).exec(text)?.[1]).find(Boolean);
  if (failing) return openAiError(Number(failing), `The fake embeddings upstream was told to fail with ${failing}.`);
  const base64 = body.encoding_format === 'base64';
  if (body.encoding_format !== undefined && !base64 && body.encoding_format !== 'float')
    return openAiError(400, "Invalid value for 'encoding_format'", 'encoding_format');
  const data = input.map((text, index) => {
    const vector = fakeEmbedding(text, dimensions);
    return { object: 'embedding', index, embedding: base64 ? float32Base64(vector) : vector };
  });
  const tokens = input.reduce((sum, text) => sum + countTokens(text), 0);
  return jsonResponse(200, {
    object: 'list',
    data,
    model: str(body.model) || 'fake-embeddings',
    usage: { prompt_tokens: tokens, total_tokens: tokens },
  });
}

/** A vector as OpenAI sends it with `encoding_format: "base64"`: its float32s, little-endian, in base64. */
function float32Base64(vector: readonly number[]): string {
  const bytes = new Uint8Array(vector.length * 4);
  const view = new DataView(bytes.buffer);
  vector.forEach((value, i) => view.setFloat32(i * 4, value, true));
  let binary = '';
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary);
}

// ---------------------------------------------------------------------------------------------
// Models, moderations, legacy completions

/** `GET /v1/models`: the models it was given, or a 500 when given none (null). */
function modelsAnswer(models: readonly string[] | null): Response {
  if (models === null) return jsonResponse(500, SERVER_ERROR);
  return jsonResponse(200, {
    object: 'list',
    data: models.map((id) => ({ id, object: 'model', created: FAKE_MODEL_CREATED, owned_by: 'fake-provider' })),
  });
}

/** When the fake's models were made, in seconds: what its list says. */
export const FAKE_MODEL_CREATED = 1_700_000_000;
/** A moderated text with this word is flagged (category `violence`). */
export const FAKE_FLAGGED_WORD = 'attack';

/** `/v1/moderations`: one result per input, flagged when its text has FAKE_FLAGGED_WORD. No usage, as OpenAI's. */
export function moderationsAnswer(body: Record<string, unknown>): Response {
  const input = typeof body.input === 'string' ? [body.input] : body.input;
  if (!Array.isArray(input) || input.length === 0)
    return openAiError(400, "'input' must be a non-empty string or array", 'input');
  const texts = input.map((item) => (typeof item === 'string' ? item : isRecord(item) ? str(item.text) : ''));
  const results = texts.map((text) => {
    const flagged = text.toLowerCase().includes(FAKE_FLAGGED_WORD);
    return {
      flagged,
      categories: { harassment: false, hate: false, 'self-harm': false, sexual: false, violence: flagged },
      category_scores: {
        harassment: 0.001,
        hate: 0.001,
        'self-harm': 0.001,
        sexual: 0.001,
        violence: flagged ? 0.97 : 0.002,
      },
      category_applied_input_types: { violence: ['text'] },
    };
  });
  return jsonResponse(200, { id: `modr-${randomId(24)}`, model: str(body.model) || 'omni-moderation-latest', results });
}

/**
 * `/v1/completions` (legacy): "You said: " and the prompt (its first, when several), or a
 * directive's `reply`, cut at `max_tokens` words (16 by default, as OpenAI's), one token a word;
 * streamed word by word with `stream: true`, then the `choices: []` usage chunk when
 * `stream_options.include_usage` asks, then `[DONE]`. A directive's `status` fails it.
 */
export function legacyCompletionAnswer(body: Record<string, unknown>): Response {
  const prompts = Array.isArray(body.prompt) ? body.prompt : [body.prompt];
  const prompt = typeof prompts[0] === 'string' ? prompts[0] : '';
  const [scenario] = parseDirective(prompt) ?? [{}];
  const status = scenario?.status;
  if (status !== undefined && (status < 200 || status >= 300))
    return openAiError(status, `The fake was told to fail with ${status}.`);
  const maxTokens = typeof body.max_tokens === 'number' ? body.max_tokens : 16;
  const words = splitTokens(scenario?.reply ?? `You said: ${prompt.replace(DIRECTIVE_LINES, '').trim()}`);
  const kept = words.slice(0, maxTokens);
  const finish = kept.length < words.length ? 'length' : 'stop';
  const usage = {
    prompt_tokens: countTokens(prompt),
    completion_tokens: kept.length,
    total_tokens: countTokens(prompt) + kept.length,
  };
  const base = {
    id: `cmpl-${randomId(24)}`,
    object: 'text_completion',
    created: Math.floor(Date.now() / 1000),
    model: str(body.model),
  };
  const choice = (text: string, finishReason: string | null) => ({
    index: 0,
    text,
    logprobs: null,
    finish_reason: finishReason,
  });
  if (body.stream !== true) return jsonResponse(200, { ...base, choices: [choice(kept.join(''), finish)], usage });
  const chunks: Record<string, unknown>[] = kept.map((word, i) => ({
    ...base,
    choices: [choice(word, i === kept.length - 1 ? finish : null)],
  }));
  const wantsUsage = isRecord(body.stream_options) && body.stream_options.include_usage === true;
  if (wantsUsage) chunks.push({ ...base, choices: [], usage });
  const events = [...chunks.map((chunk) => JSON.stringify(chunk)), '[DONE]'].map((data) => `data: ${data}\n\n`);
  return textResponse(200, events.join(''), { 'content-type': 'text/event-stream; charset=utf-8' });
}

/** The fake's vector for `text` (see embeddingsAnswer): exported so tests can compute expected scores. */
export function fakeEmbedding(text: string, dimensions = FAKE_EMBEDDING_DIMENSIONS): number[] {
  const vector = new Array<number>(dimensions).fill(0);
  for (const word of text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []) {
    let hash = 2166136261;
    for (let i = 0; i < word.length; i++) hash = Math.imul(hash ^ word.charCodeAt(i), 16777619) >>> 0;
    const slot = hash % dimensions;
    vector[slot] = defined(vector[slot]) + (hash & 0x80000000 ? -1 : 1);
  }
  const norm = Math.hypot(...vector);
  // An empty text still gets a unit vector: providers never answer zeros.
  return norm === 0 ? vector.map((_, i) => (i === 0 ? 1 : 0)) : vector.map((value) => value / norm);
}

// ---------------------------------------------------------------------------------------------
// Requests: routes, directives, turns

/** The endpoints the fake has. */
export type Operation = 'chat' | 'embeddings' | 'completions' | 'moderations' | 'models';
const SUFFIXES: Record<Operation, string> = {
  chat: 'chat/completions',
  embeddings: 'embeddings',
  completions: 'completions',
  moderations: 'moderations',
  models: 'models',
};

interface Target {
  flavour: 'openai' | 'azure';
  operation: Operation;
  /** Set on Azure's deployment paths, which need `api-version` and take the model from the path. */
  deployment?: string;
}

function route(method: string, path: string): Target | undefined {
  for (const [operation, suffix] of Object.entries(SUFFIXES) as [Operation, string][]) {
    if (method !== (operation === 'models' ? 'GET' : 'POST')) continue;
    if (path === `/v1/${suffix}` || path === `/${suffix}`) return { flavour: 'openai', operation };
    if (path === `/openai/v1/${suffix}`) return { flavour: 'azure', operation };
    const deployment = new RegExp(`^/openai/deployments/([^/]+)/${suffix}$`).exec(path)?.[1];
    if (deployment !== undefined) return { flavour: 'azure', operation, deployment: decodeURIComponent(deployment) };
  }
  return undefined;
}

/** A request the fake refuses with 400 because the test asked for something impossible. */
class FakeRequestError extends Error {}

const GATE_PATH = /^\/fake\/gates\/([^/]+)(\/open)?$/;

const DIRECTIVE_LINE = /^[ \t]*#fake[ \t]+(.*?)[ \t]*$/m;
const DIRECTIVE_LINES = /^[ \t]*#fake[ \t].*$/gm;

/** The function the gateway gives a model for a run with the file_search tool. */
const FILE_SEARCH = 'file_search';

/** The scenarios of the `#fake` line in `text` (an object is one step), or undefined without one. */
export function parseDirective(text: string): FakeScenario[] | undefined {
  const json = DIRECTIVE_LINE.exec(text)?.[1];
  if (json === undefined) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch (error) {
    throw new FakeRequestError(
      `fake upstream: the #fake directive is not valid JSON (${(error as Error).message}): ${json}`,
    );
  }
  const steps = Array.isArray(value) ? value : [value];
  return steps.map((step, i) => {
    try {
      return validateScenario(step, `#fake directive${Array.isArray(value) ? ` step ${i}` : ''}`);
    } catch (error) {
      throw new FakeRequestError((error as Error).message);
    }
  });
}

interface Turn {
  /** The text of the last user message (empty without one). */
  userText: string;
  /** Assistant messages since the last user message: which step of a directive applies. */
  step: number;
  /** Contents of the tool messages since the last user message: outputs being submitted. */
  toolOutputs: string[];
}

function analyseTurn(messages: readonly unknown[]): Turn {
  let last = -1;
  messages.forEach((message, i) => {
    if (isRecord(message) && message.role === 'user') last = i;
  });
  const after = messages.slice(last + 1).filter(isRecord);
  return {
    userText: last >= 0 ? messageText(messages[last]) : '',
    step: after.filter((m) => m.role === 'assistant').length,
    toolOutputs: after.filter((m) => m.role === 'tool').map(messageText),
  };
}

/** Tool messages must answer, one for one, the tool calls of the assistant message just before them. */
function checkToolMessages(messages: readonly unknown[]): { message: string; param: string } | undefined {
  let pending = new Set<string>();
  let askedAt = -1;
  const unanswered = () => ({
    message: `An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: ${[...pending].join(', ')}`,
    param: `messages.[${askedAt}].role`,
  });
  for (const [i, message] of messages.entries()) {
    const m = isRecord(message) ? message : {};
    if (m.role === 'tool') {
      if (!pending.delete(str(m.tool_call_id))) {
        return {
          message:
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.",
          param: `messages.[${i}].role`,
        };
      }
      continue;
    }
    if (pending.size > 0) return unanswered();
    const calls = m.role === 'assistant' && Array.isArray(m.tool_calls) ? m.tool_calls : [];
    pending = new Set(calls.map((call) => (isRecord(call) ? str(call.id) : '')));
    askedAt = i;
  }
  return pending.size > 0 ? unanswered() : undefined;
}

function messageText(message: unknown): string {
  if (!isRecord(message)) return '';
  const { content } = message;
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .filter((part): part is Record<string, unknown> => isRecord(part) && typeof part.text === 'string')
    .map((part) => part.text as string)
    .join('\n');
}

const TOOL_CALL_FIELDS = new Set(['name', 'arguments', 'id']);
type FieldKind =
  'text' | 'flag' | 'count' | 'duration' | 'status' | 'record' | 'tool_calls' | 'queries' | 'gate' | 'any';
// A Record over the keys makes the compiler insist that every scenario field is validated.
const SCENARIO_FIELDS: Record<keyof FakeScenario, FieldKind> = {
  reply: 'text',
  reasoning: 'text',
  reasoning_field: 'text',
  echo_messages: 'flag',
  chunk_tokens: 'count',
  chunks: 'count',
  stream_bytes: 'count',
  chunk_bytes: 'count',
  tool_calls: 'tool_calls',
  argument_chunk_chars: 'count',
  finish_reason: 'text',
  usage: 'record',
  model: 'text',
  completion_id: 'any',
  first_byte_delay_ms: 'duration',
  hold: 'gate',
  chunk_delay_ms: 'duration',
  status: 'status',
  retry_after: 'duration',
  error: 'any',
  headers: 'record',
  stall_after_chunks: 'count',
  stall_after_done: 'flag',
  cut_after_chunks: 'count',
  malformed_after_chunks: 'count',
  error_after_chunks: 'count',
  stream_error: 'any',
  one_write: 'flag',
  tool_call_index: 'any',
  tool_argument_bytes: 'count',
  flood: 'text',
  flood_bytes: 'count',
  gzip_error_bytes: 'count',
  tool_argument_queries: 'queries',
};

/** Refuses unknown fields and wrong types, so a typo in a test fails loudly instead of being ignored. */
function validateScenario(value: unknown, where: string): FakeScenario {
  if (!isRecord(value)) throw new Error(`${where}: a scenario must be a JSON object, got ${JSON.stringify(value)}`);
  for (const [key, field] of Object.entries(value)) {
    const kind = (SCENARIO_FIELDS as Record<string, FieldKind | undefined>)[key];
    if (kind === undefined)
      throw new Error(`${where}: unknown scenario field '${key}' (known: ${Object.keys(SCENARIO_FIELDS).join(', ')})`);
    const ok =
      kind === 'any' ||
      (kind === 'text' && typeof field === 'string') ||
      (kind === 'gate' && typeof field === 'string' && GATE_NAME.test(field)) ||
      (kind === 'flag' && typeof field === 'boolean') ||
      (kind === 'count' && Number.isInteger(field) && (field as number) >= 0) ||
      (kind === 'duration' && typeof field === 'number' && field >= 0 && Number.isFinite(field)) ||
      (kind === 'status' && Number.isInteger(field) && (field as number) >= 200 && (field as number) <= 599) ||
      (kind === 'record' && isRecord(field)) ||
      (kind === 'tool_calls' && isToolCallsSpec(field)) ||
      (kind === 'queries' && isQueriesSpec(field));
    if (!ok) throw new Error(`${where}: invalid value for '${key}': ${JSON.stringify(field)}`);
  }
  return value as FakeScenario;
}

function isQueriesSpec(field: unknown): boolean {
  return (
    isRecord(field) &&
    Object.keys(field).every((k) => k === 'count' || k === 'bytes') &&
    [field.count, field.bytes].every((n) => Number.isInteger(n) && n >= 0)
  );
}

function isToolCallsSpec(field: unknown): boolean {
  if (typeof field === 'boolean') return true;
  if (Number.isInteger(field)) return (field as number) >= 0;
  return (
    Array.isArray(field) &&
    field.every((call) => isRecord(call) && Object.keys(call).every((k) => TOOL_CALL_FIELDS.has(k)))
  );
}

// ---------------------------------------------------------------------------------------------
// Planning an answer

interface ToolCallPlan {
  id: string;
  name: string;
  arguments: string;
}

interface Plan {
  scenario: FakeScenario;
  id: unknown;
  created: number;
  model: string;
  azure: boolean;
  includeUsage: boolean;
  obfuscate: boolean;
  /** The content, lazily, one streamed chunk per item. */
  content: () => Iterable<string>;
  toolCalls: ToolCallPlan[];
  limit: number | undefined;
  promptTokens: number;
}

function makePlan(
  scenario: FakeScenario,
  body: Record<string, unknown>,
  messages: unknown[],
  toolCalls: ToolCallPlan[],
  target: Target,
): Plan {
  const streamOptions = isRecord(body.stream_options) ? body.stream_options : {};
  const limit = [body.max_completion_tokens, body.max_tokens].find((v): v is number => typeof v === 'number');
  let content: () => Iterable<string>;
  if (scenario.stream_bytes !== undefined) {
    const total = scenario.stream_bytes;
    const size = Math.max(1, scenario.chunk_bytes ?? 1024);
    content = () => generatedText(total, size);
  } else {
    const text = replyText(scenario, body, messages, toolCalls.length > 0);
    content = () => groupTokens(splitTokens(text), scenario);
  }
  return {
    scenario,
    id: scenario.completion_id !== undefined ? scenario.completion_id : `chatcmpl-${randomId(29)}`,
    created: Math.floor(Date.now() / 1000),
    model: scenario.model ?? (str(body.model) || target.deployment || 'gpt-4o'),
    azure: target.flavour === 'azure',
    includeUsage: streamOptions.include_usage === true,
    obfuscate: target.flavour === 'openai' && streamOptions.include_obfuscation !== false,
    content,
    toolCalls,
    limit,
    promptTokens: promptTokens(messages),
  };
}

function replyText(
  scenario: FakeScenario,
  body: Record<string, unknown>,
  messages: unknown[],
  callsTools: boolean,
): string {
  if (scenario.echo_messages) return JSON.stringify(messages);
  if (scenario.reply !== undefined) return scenario.reply;
  if (callsTools) return '';
  const text = defaultReplyText(messages);
  const format = isRecord(body.response_format) ? body.response_format : {};
  if (format.type === 'json_object') return JSON.stringify({ reply: text });
  if (format.type === 'json_schema') {
    const schema = isRecord(format.json_schema) ? format.json_schema.schema : undefined;
    return JSON.stringify(exampleFromSchema(schema ?? { type: 'object' }));
  }
  return text;
}

/**
 * The calls to make. Without `tool_calls` in the scenario, a forcing `tool_choice` ("required" or a
 * named function) still makes one, but only before tool outputs come back, or a run would loop.
 * Otherwise, given `search` (the user's message, for the built-in answer) and a function named
 * `file_search` (the gateway's, for a run with the file_search tool), it calls that with
 * `{"queries":[search]}`, once a turn, unless `tool_choice` is "none".
 */
function resolveToolCalls(
  scenario: FakeScenario,
  body: Record<string, unknown>,
  outputsSubmitted: boolean,
  search = '',
): ToolCallPlan[] {
  const tools = (Array.isArray(body.tools) ? body.tools : [])
    .filter((t): t is Record<string, unknown> => isRecord(t) && t.type === 'function' && isRecord(t.function))
    .map((t) => t.function as Record<string, unknown>);
  const spec = scenario.tool_calls;
  let calls: FakeToolCall[];
  if (spec === undefined || spec === false || spec === 0) {
    const choice = body.tool_choice;
    if (outputsSubmitted || scenario.reply !== undefined || tools.length === 0) return [];
    if (choice === 'required') calls = [{}];
    else if (isRecord(choice) && isRecord(choice.function) && typeof choice.function.name === 'string')
      calls = [{ name: choice.function.name }];
    else if (search !== '' && choice !== 'none' && tools.some((tool) => tool.name === FILE_SEARCH))
      calls = [{ name: FILE_SEARCH, arguments: { queries: [search] } }];
    else return [];
  } else if (spec === true) {
    calls = [{}];
  } else if (typeof spec === 'number') {
    calls = Array.from({ length: spec }, () => ({}));
  } else {
    calls = spec;
  }
  return calls.map((call, i) => {
    const name = call.name ?? str(tools[i % Math.max(1, tools.length)]?.name);
    if (!name)
      throw new FakeRequestError(
        'fake upstream: the scenario asks for a tool call without a name, but the request has no function tools',
      );
    const tool = tools.find((t) => t.name === name);
    const args =
      typeof call.arguments === 'string'
        ? call.arguments
        : JSON.stringify(call.arguments ?? (tool?.parameters !== undefined ? exampleFromSchema(tool.parameters) : {}));
    return { id: call.id ?? `call_${randomId(24)}`, name, arguments: args };
  });
}

/** A small value valid against common JSON schemas: required properties, enums' first values, minimums. */
function exampleFromSchema(schema: unknown, depth = 0): unknown {
  if (!isRecord(schema) || depth > 8) return {};
  if ('const' in schema) return schema.const;
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0];
  if ('default' in schema) return schema.default;
  const variants = schema.anyOf ?? schema.oneOf;
  if (Array.isArray(variants) && variants.length > 0) return exampleFromSchema(variants[0], depth + 1);
  let type = schema.type;
  if (Array.isArray(type)) type = type.find((t) => t !== 'null') ?? 'null';
  switch (type) {
    case 'string':
      return 'example';
    case 'number':
    case 'integer':
      return typeof schema.minimum === 'number' ? schema.minimum : 0;
    case 'boolean':
      return false;
    case 'null':
      return null;
    case 'array': {
      const count = typeof schema.minItems === 'number' ? schema.minItems : 0;
      return Array.from({ length: count }, () => exampleFromSchema(schema.items, depth + 1));
    }
    default: {
      const properties = isRecord(schema.properties) ? schema.properties : {};
      const keys = Array.isArray(schema.required)
        ? schema.required.filter((k): k is string => typeof k === 'string')
        : Object.keys(properties);
      return Object.fromEntries(keys.map((key) => [key, exampleFromSchema(properties[key], depth + 1)]));
    }
  }
}

/** Pieces of one word each with its leading whitespace, so that joining them gives back the text. */
function splitTokens(text: string): string[] {
  const pieces = text.match(/\s*\S+/g) ?? [];
  const tail = /\s+$/.exec(text)?.[0] ?? '';
  if (pieces.length === 0) return text ? [text] : [];
  pieces[pieces.length - 1] += tail;
  return pieces;
}

function* groupTokens(pieces: string[], scenario: FakeScenario): Generator<string> {
  const size = scenario.chunks ? Math.ceil(pieces.length / scenario.chunks) : (scenario.chunk_tokens ?? 1);
  for (let i = 0; i < pieces.length; i += Math.max(1, size)) yield pieces.slice(i, i + Math.max(1, size)).join('');
}

const FILLER = 'lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore ';

/**
 * `total` bytes of words in chunks of `size` bytes. Each full chunk ends with a space, so no word
 * straddles two chunks and per-chunk word counts add up to the total.
 */
function* generatedText(total: number, size: number): Generator<string> {
  const template = `${FILLER.repeat(Math.ceil(size / FILLER.length) + 1).slice(0, size - 1)} `.slice(-size);
  for (let sent = 0; sent < total; sent += size)
    yield total - sent >= size ? template : template.slice(0, total - sent);
}

/** `{"queries":[…]}` of `count` generated queries of `bytes` bytes, in fragments of at most `size`. */
function* generatedQueries(count: number, bytes: number, size: number): Generator<string> {
  yield '{"queries":[';
  for (let i = 0; i < count; i++) {
    yield i === 0 ? '"' : ',"';
    yield* generatedText(bytes, size);
    yield '"';
  }
  yield ']}';
}

/** `text` in pieces of `size` characters. */
function* slices(text: string, size: number): Generator<string> {
  for (let i = 0; i < text.length; i += size) yield text.slice(i, i + size);
}

/** `text` repeated, `total` characters in all (endless when infinite), in pieces of `size`. */
function* repeated(text: string, total: number, size: number): Generator<string> {
  if (text === '') return;
  const width = Math.max(1, size);
  const block = text.repeat(Math.ceil(width / text.length) + 1);
  for (let sent = 0; sent < total; sent += width) {
    const offset = sent % text.length;
    yield block.slice(offset, offset + Math.min(width, total - sent));
  }
}

const gzipBombs = new Map<number, Promise<Uint8Array>>();

/** A gzip body that inflates to `bytes` bytes of an error JSON's beginning and filler; made once per size. */
function gzipBomb(bytes: number): Promise<Uint8Array> {
  let bomb = gzipBombs.get(bytes);
  if (!bomb) {
    bomb = (async () => {
      const head = '{"error":{"message":"';
      const pieces = repeated('a', Math.max(0, bytes - head.length), 65536);
      const encoder = new TextEncoder();
      let opened = false;
      const source = new ReadableStream<Uint8Array>({
        pull(controller) {
          if (!opened) {
            opened = true;
            return controller.enqueue(encoder.encode(head));
          }
          const next = pieces.next();
          if (next.done) controller.close();
          else controller.enqueue(encoder.encode(next.value));
        },
      });
      const parts: Uint8Array[] = [];
      const reader = source.pipeThrough(new CompressionStream('gzip')).getReader();
      for (let read = await reader.read(); !read.done; read = await reader.read()) parts.push(read.value);
      const out = new Uint8Array(parts.reduce((sum, part) => sum + part.length, 0));
      let at = 0;
      for (const part of parts) {
        out.set(part, at);
        at += part.length;
      }
      return out;
    })();
    gzipBombs.set(bytes, bomb);
  }
  return bomb;
}

type Delta =
  | { type: 'reasoning'; text: string }
  | { type: 'content'; text: string }
  | { type: 'tool_header'; index: number; call: ToolCallPlan }
  | { type: 'tool_args'; index: number; text: string }
  | { type: 'finish'; reason: string };

/** The answer as deltas, spending tokens as it goes and stopping with `length` when the limit runs out. */
function* completionDeltas(plan: Plan, meter: { tokens: number; reasoning: number }): Generator<Delta> {
  const override = plan.scenario.finish_reason;
  let budget = plan.limit ?? Number.POSITIVE_INFINITY;
  const spend = (tokens: number): void => {
    budget -= tokens;
    meter.tokens += tokens;
  };
  for (const text of splitTokens(plan.scenario.reasoning ?? '')) {
    if (budget < 1) {
      yield { type: 'finish', reason: override ?? 'length' };
      return;
    }
    spend(1);
    meter.reasoning += 1;
    yield { type: 'reasoning', text };
  }
  for (const text of plan.content()) {
    const tokens = countTokens(text);
    if (tokens > budget) {
      const kept = splitTokens(text).slice(0, budget).join('');
      spend(budget);
      if (kept) yield { type: 'content', text: kept };
      yield { type: 'finish', reason: override ?? 'length' };
      return;
    }
    spend(tokens);
    yield { type: 'content', text };
  }
  const fragmentSize = Math.max(1, plan.scenario.argument_chunk_chars ?? ARGUMENT_CHUNK_CHARS);
  const generated = plan.scenario.tool_argument_bytes;
  const queries = plan.scenario.tool_argument_queries;
  for (const [index, call] of plan.toolCalls.entries()) {
    const fragments =
      queries !== undefined
        ? generatedQueries(queries.count, queries.bytes, fragmentSize)
        : generated !== undefined
          ? generatedText(generated, fragmentSize)
          : slices(call.arguments, fragmentSize);
    const deltas = (function* (): Generator<Delta> {
      yield { type: 'tool_header', index, call };
      for (const text of fragments) yield { type: 'tool_args', index, text };
    })();
    for (const delta of deltas) {
      if (budget < 1) {
        yield { type: 'finish', reason: override ?? 'length' };
        return;
      }
      spend(1);
      yield delta;
    }
  }
  yield { type: 'finish', reason: override ?? (plan.toolCalls.length > 0 ? 'tool_calls' : 'stop') };
}

function usageOf(plan: Plan, completion: number, reasoning: number): Record<string, unknown> {
  const override = plan.scenario.usage ?? {};
  const prompt = override.prompt_tokens ?? plan.promptTokens;
  const completed = override.completion_tokens ?? completion;
  const sum = typeof prompt === 'number' && typeof completed === 'number' ? prompt + completed : null;
  return {
    prompt_tokens: prompt,
    completion_tokens: completed,
    total_tokens: override.total_tokens ?? sum,
    prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
    completion_tokens_details: {
      reasoning_tokens: reasoning,
      audio_tokens: 0,
      accepted_prediction_tokens: 0,
      rejected_prediction_tokens: 0,
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Writing an answer

/** The `chat.completion.chunk` payloads, in OpenAI's order and shapes. */
function* chunkPayloads(plan: Plan): Generator<Record<string, unknown>> {
  const base = {
    id: plan.id,
    object: 'chat.completion.chunk',
    created: plan.created,
    model: plan.model,
    service_tier: 'default',
    system_fingerprint: SYSTEM_FINGERPRINT,
  };
  // OpenAI pads chunks with a random `obfuscation` field (against length side channels) unless told not to.
  const tail = (): Record<string, unknown> => ({
    ...(plan.includeUsage ? { usage: null } : {}),
    ...(plan.obfuscate ? { obfuscation: randomId(1 + Math.floor(Math.random() * 12)) } : {}),
  });
  const chunk = (delta: Record<string, unknown>, finishReason: string | null = null): Record<string, unknown> => ({
    ...base,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
    ...tail(),
  });
  // A hostile index replaces every call's position; null leaves it out.
  const indexOf = (index: number): Record<string, unknown> =>
    'tool_call_index' in plan.scenario
      ? plan.scenario.tool_call_index === null
        ? {}
        : { index: plan.scenario.tool_call_index }
      : { index };
  const header = (index: number, call: ToolCallPlan): Record<string, unknown> => ({
    ...indexOf(index),
    id: call.id,
    type: 'function',
    function: { name: call.name, arguments: '' },
  });

  if (plan.azure) yield AZURE_PROMPT_FILTER_CHUNK;
  const meter = { tokens: 0, reasoning: 0 };
  let first = true;
  for (const delta of completionDeltas(plan, meter)) {
    if (first) {
      first = false;
      // OpenAI folds the role into the first tool call when there is no text.
      if (delta.type === 'tool_header') {
        yield chunk({ role: 'assistant', content: null, tool_calls: [header(delta.index, delta.call)], refusal: null });
        continue;
      }
      yield chunk({ role: 'assistant', content: '', refusal: null });
    }
    if (delta.type === 'reasoning') yield chunk({ [plan.scenario.reasoning_field ?? 'reasoning_content']: delta.text });
    else if (delta.type === 'content') yield chunk({ content: delta.text });
    else if (delta.type === 'tool_header') yield chunk({ tool_calls: [header(delta.index, delta.call)] });
    else if (delta.type === 'tool_args')
      yield chunk({ tool_calls: [{ ...indexOf(delta.index), function: { arguments: delta.text } }] });
    else yield chunk({}, delta.reason);
  }
  if (plan.includeUsage) {
    yield {
      ...base,
      choices: [],
      usage: usageOf(plan, meter.tokens, meter.reasoning),
      ...(plan.obfuscate ? { obfuscation: randomId(8) } : {}),
    };
  }
}

/**
 * A non-streamed answer (`chat.completion`): the streamed chunks folded into one message, as
 * OpenAI's answer to the same request would be, usage always included. The scenario's stream
 * faults (stalls, cuts, malformed chunks) and delays between chunks do not apply.
 */
function completionObject(plan: Plan): Record<string, unknown> {
  let content: string | null = null;
  let reasoning: string | null = null;
  const reasoningField = plan.scenario.reasoning_field ?? 'reasoning_content';
  let finishReason: unknown = null;
  let usage: unknown;
  const calls: { id: unknown; type: 'function'; function: { name: unknown; arguments: string } }[] = [];
  for (const chunk of chunkPayloads({ ...plan, azure: false, obfuscate: false, includeUsage: true })) {
    if (Array.isArray(chunk.choices) && chunk.choices.length === 0) usage = chunk.usage;
    const choice = Array.isArray(chunk.choices) && isRecord(chunk.choices[0]) ? chunk.choices[0] : {};
    finishReason = choice.finish_reason ?? finishReason;
    const delta = isRecord(choice.delta) ? choice.delta : {};
    if (typeof delta.content === 'string') content = (content ?? '') + delta.content;
    const thought = delta[reasoningField];
    if (typeof thought === 'string') reasoning = (reasoning ?? '') + thought;
    for (const [i, fragment] of (Array.isArray(delta.tool_calls) ? delta.tool_calls : []).entries()) {
      const fn = isRecord(fragment) && isRecord(fragment.function) ? fragment.function : {};
      const index = isRecord(fragment) && typeof fragment.index === 'number' ? fragment.index : i;
      const call = (calls[index] ??= { id: undefined, type: 'function', function: { name: undefined, arguments: '' } });
      if (isRecord(fragment) && fragment.id !== undefined) call.id = fragment.id;
      if (fn.name !== undefined) call.function.name = fn.name;
      call.function.arguments += str(fn.arguments);
    }
  }
  return {
    id: plan.id,
    object: 'chat.completion',
    created: plan.created,
    model: plan.model,
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content: calls.length > 0 && content === '' ? null : content,
          refusal: null,
          annotations: [],
          ...(reasoning !== null ? { [reasoningField]: reasoning } : {}),
          ...(calls.length > 0 ? { tool_calls: calls } : {}),
        },
        logprobs: null,
        finish_reason: finishReason,
      },
    ],
    usage,
    service_tier: 'default',
    system_fingerprint: SYSTEM_FINGERPRINT,
  };
}

/** The text pieces of `frames` as one, then what follows them (a stall or a cut). */
async function* inOneWrite(frames: AsyncGenerator<Piece>): AsyncGenerator<Piece> {
  let text = '';
  for await (const piece of frames) {
    if (typeof piece === 'string') {
      text += piece;
      continue;
    }
    if (text) yield text;
    return yield piece;
  }
  if (text) yield text;
}

/** The SSE body, with the scenario's delays and faults woven in. */
async function* sseFrames(plan: Plan, signal: AbortSignal): AsyncGenerator<Piece> {
  const s = plan.scenario;
  if (s.flood !== undefined) {
    let first = true;
    for (const piece of repeated(s.flood, s.flood_bytes ?? Number.POSITIVE_INFINITY, s.chunk_bytes ?? s.flood.length)) {
      if (!first && s.chunk_delay_ms && !(await sleep(s.chunk_delay_ms, signal))) return;
      if (signal.aborted) return;
      first = false;
      yield piece;
    }
  }
  const payloads = chunkPayloads(plan);
  for (let sent = 0; ; sent += 1) {
    const next = payloads.next();
    const firesNow = (n: number | undefined): boolean =>
      n !== undefined && (n === sent || (next.done === true && n > sent));
    if (firesNow(s.malformed_after_chunks)) yield 'data: {not json\n\n';
    if (firesNow(s.stall_after_chunks)) return yield STALL;
    if (firesNow(s.cut_after_chunks)) return yield CUT;
    if (firesNow(s.error_after_chunks)) return yield `data: ${JSON.stringify(s.stream_error ?? SERVER_ERROR)}\n\n`;
    if (sent > 0 && s.chunk_delay_ms && !(await sleep(s.chunk_delay_ms, signal))) return;
    if (next.done) {
      yield 'data: [DONE]\n\n';
      if (s.stall_after_done) yield STALL;
      return;
    }
    yield `data: ${JSON.stringify(next.value)}\n\n`;
  }
}

/**
 * A pull-driven body: nothing is produced before the consumer asks (highWaterMark 0), so chunks
 * leave one by one and a slow reader slows the producer. STALL waits for the end of the exchange;
 * CUT errors the body, which the HTTP server turns into a dropped connection.
 */
function bodyStream(
  produce: (signal: AbortSignal) => Iterator<Piece> | AsyncIterator<Piece>,
  finish: (outcome: Exclude<RequestOutcome, 'open'>) => void,
  clientSignal: AbortSignal,
  openBodies: Set<() => void>,
): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  const stop = new AbortController();
  const pieces = produce(stop.signal);
  let endBody = (): void => {};
  const end = (outcome: Exclude<RequestOutcome, 'open'>): void => {
    openBodies.delete(endBody);
    clientSignal.removeEventListener('abort', onClientAbort);
    stop.abort();
    finish(outcome);
    void Promise.resolve(pieces.return?.()).catch(() => {});
  };
  let onClientAbort = (): void => {};
  return new ReadableStream<Uint8Array>(
    {
      start(controller) {
        const fail = (outcome: 'cancelled' | 'closed', reason: unknown): void => {
          end(outcome);
          try {
            controller.error(reason);
          } catch {
            // already closed
          }
        };
        onClientAbort = () => fail('cancelled', clientSignal.reason);
        endBody = () => fail('closed', new Error('fake upstream: connection closed by the server'));
        if (clientSignal.aborted) onClientAbort();
        else clientSignal.addEventListener('abort', onClientAbort, { once: true });
        openBodies.add(endBody);
      },
      async pull(controller) {
        if (stop.signal.aborted) return;
        let next: IteratorResult<Piece>;
        try {
          next = await pieces.next();
        } catch (error) {
          end('cut');
          controller.error(error);
          return;
        }
        if (stop.signal.aborted) return;
        if (next.done) {
          end('completed');
          controller.close();
        } else if (next.value === STALL) {
          await new Promise<void>((resolve) => stop.signal.addEventListener('abort', () => resolve(), { once: true }));
        } else if (next.value === CUT) {
          end('cut');
          controller.error(new FakeCutError());
        } else {
          controller.enqueue(encoder.encode(next.value));
        }
      },
      cancel() {
        end('cancelled');
      },
    },
    { highWaterMark: 0 },
  );
}

/** How a cut body errors when the fake is called in-process; over HTTP the client sees the socket close instead. */
export class FakeCutError extends Error {
  constructor() {
    super('fake upstream: connection cut mid-response');
    this.name = 'FakeCutError';
  }
}

const STREAMED = new WeakSet<Response>();

function isStreamed(response: Response): boolean {
  return STREAMED.has(response);
}

function streamedResponse(body: ReadableStream<Uint8Array>, headers: Record<string, string>): Response {
  const response = new Response(body, { status: 200, headers: { 'x-request-id': `req_${randomId(32)}`, ...headers } });
  STREAMED.add(response);
  return response;
}

function textResponse(status: number, text: string, headers: Record<string, string>): Response {
  return new Response(text, {
    status,
    headers: {
      'x-request-id': `req_${randomId(32)}`,
      'content-length': String(new TextEncoder().encode(text).length),
      ...headers,
    },
  });
}

function jsonResponse(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  return textResponse(status, JSON.stringify(body), { 'content-type': 'application/json', ...headers });
}

function openAiError(
  status: number,
  message: string,
  param: string | null = null,
  code: string | null = null,
): Response {
  return jsonResponse(status, { error: { message, type: 'invalid_request_error', param, code } });
}

// ---------------------------------------------------------------------------------------------
// The real APIs' bodies and constants

const SYSTEM_FINGERPRINT = 'fp_fake0001';
const SERVER_ERROR = {
  error: {
    message: 'The server had an error while processing your request. Sorry about that!',
    type: 'server_error',
    param: null,
    code: null,
  },
};
const BAD_JSON_MESSAGE =
  "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble figuring out how to fix this, please contact us through our help center at help.openai.com.)";
const MISSING_KEY_MESSAGE =
  "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) if you're accessing the API from your browser and are prompted for a username. You can obtain an API key from https://platform.openai.com/account/api-keys.";
const AZURE_UNAUTHORIZED = {
  error: {
    code: '401',
    message:
      'Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.',
  },
};
const AZURE_NOT_FOUND = { error: { code: '404', message: 'Resource not found' } };
const RATE_LIMIT_HEADERS = {
  'x-ratelimit-limit-requests': '3',
  'x-ratelimit-remaining-requests': '0',
  'x-ratelimit-reset-requests': '20s',
};
const SAFE = { filtered: false, severity: 'safe' };
const FILTER_RESULTS = { hate: SAFE, self_harm: SAFE, sexual: SAFE, violence: SAFE };
/** Azure starts every stream with this chunk: no choices, no usage; naive `choices[0]` readers break on it. */
const AZURE_PROMPT_FILTER_CHUNK = {
  choices: [],
  created: 0,
  id: '',
  model: '',
  object: '',
  prompt_filter_results: [{ prompt_index: 0, content_filter_results: FILTER_RESULTS }],
};

function defaultErrorBody(
  status: number,
  azure: boolean,
  model: string,
  retryAfter: number,
  apiVersion: string,
): unknown {
  if (status === 429) {
    if (azure) {
      return {
        error: {
          code: '429',
          message: `Requests to the ChatCompletions_Create Operation under Azure OpenAI API version ${apiVersion} have exceeded call rate limit of your current OpenAI S0 pricing tier. Please retry after ${retryAfter} seconds. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit.`,
        },
      };
    }
    const message = `Rate limit reached for ${model} in organization org-fake on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in ${retryAfter}s. Visit https://platform.openai.com/account/rate-limits to learn more.`;
    return { error: { message, type: 'requests', param: null, code: 'rate_limit_exceeded' } };
  }
  if (status === 500) return SERVER_ERROR;
  if (status === 503) {
    return {
      error: {
        message: 'The engine is currently overloaded, please try again later.',
        type: 'server_error',
        param: null,
        code: null,
      },
    };
  }
  if (status === 404) {
    return {
      error: {
        message: `The model \`${model}\` does not exist or you do not have access to it.`,
        type: 'invalid_request_error',
        param: null,
        code: 'model_not_found',
      },
    };
  }
  if (status === 401) {
    const message =
      'Incorrect API key provided: sk-fake***. You can find your API key at https://platform.openai.com/account/api-keys.';
    return { error: { message, type: 'invalid_request_error', param: null, code: 'invalid_api_key' } };
  }
  const type = status >= 500 ? 'server_error' : 'invalid_request_error';
  return { error: { message: `The fake upstream answered with HTTP ${status}.`, type, param: null, code: null } };
}

// ---------------------------------------------------------------------------------------------
// Small helpers

function isRecord(value: unknown): value is Record<string, any> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function str(value: unknown): string {
  return typeof value === 'string' ? value : '';
}

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

function randomId(length: number): string {
  let id = '';
  for (let i = 0; i < length; i += 1) id += ALPHABET[Math.floor(Math.random() * ALPHABET.length)];
  return id;
}

function maskKey(key: string): string {
  return key.length > 10 ? `${key.slice(0, 3)}${'*'.repeat(key.length - 7)}${key.slice(-4)}` : '*'.repeat(key.length);
}

/** Resolves true after ms, or false as soon as the signal aborts. */
function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve(false);
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

// ---------------------------------------------------------------------------------------------
// Over HTTP

export interface StartFakeUpstreamOptions extends FakeUpstreamOptions {
  /** Default 0: a free port. */
  port?: number;
  /** Default 127.0.0.1. */
  host?: string;
  /**
   * Close, without an answer, the connection of a request that arrives on a connection that
   * already carried one: what a client meets when it sends on a kept-alive connection that the
   * server closed while it sat idle, before the client noticed (Node closes idle ones after 5 s).
   * Such requests are not recorded. Default false.
   */
  dropReusedConnections?: boolean;
}

export class FakeUpstreamServer extends FakeUpstream {
  /** e.g. http://127.0.0.1:PORT */
  readonly url: string;
  /** url + '/v1', what the OpenAI SDK takes as baseURL. */
  readonly baseURL: string;
  readonly port: number;
  readonly #server: Server;
  readonly #sockets: Set<Socket>;
  #closing: Promise<void> | undefined;

  constructor(options: FakeUpstreamOptions, server: Server, sockets: Set<Socket>, url: string, port: number) {
    super(options);
    this.#server = server;
    this.#sockets = sockets;
    this.url = url;
    this.baseURL = `${url}/v1`;
    this.port = port;
  }

  /** TCP connections currently open, idle keep-alive ones included. */
  get openConnections(): number {
    return this.#sockets.size;
  }

  /** Stops listening and destroys every connection, stalled streams included; never waits for clients. */
  readonly close = (): Promise<void> => {
    this.#closing ??= (async () => {
      this.abortAll();
      const closed = new Promise<void>((resolve) => this.#server.close(() => resolve()));
      this.#server.closeAllConnections();
      for (const socket of this.#sockets) socket.destroy();
      await closed;
      // The server reports closed before the sockets' own close events have run.
      const deadline = Date.now() + 1000;
      while (this.#sockets.size > 0 && Date.now() < deadline) await sleep(1);
      await this.waitForIdle(1000).catch(() => {});
    })();
    return this.#closing;
  };
}

/** Serves a fake on 127.0.0.1 (a free port unless told) and resolves once it listens. */
export async function startFakeUpstream(options: StartFakeUpstreamOptions = {}): Promise<FakeUpstreamServer> {
  const { createServer } = await import('node:http');
  const sockets = new Set<Socket>();
  /** Connections that carried an answer, for dropReusedConnections. */
  const answered = new WeakSet<Socket>();
  let fake: FakeUpstreamServer | undefined;
  const server = createServer((req, res) => {
    if (!fake || (options.dropReusedConnections && answered.has(req.socket))) return void req.socket.destroy();
    res.once('finish', () => answered.add(req.socket));
    void serveNode(fake, req, res);
  });
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  const host = options.host ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => resolve());
  });
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  const urlHost = host.includes(':') ? `[${host}]` : host;
  fake = new FakeUpstreamServer(options, server, sockets, `http://${urlHost}:${port}`, port);
  return fake;
}

/** Bridges node:http to the Web handler, chunk by chunk, and turns an errored body into a dropped socket. */
async function serveNode(fake: FakeUpstream, req: IncomingMessage, res: ServerResponse): Promise<void> {
  // The client going away must reach the handler (delays, stalls) the way request.signal would.
  const gone = new AbortController();
  const closed = new Promise<void>((resolve) => res.once('close', () => resolve()));
  res.once('close', () => {
    if (!res.writableFinished) gone.abort(new Error('fake upstream: the client closed the connection'));
  });
  try {
    const reading = hostileReading(req.url ?? '/');
    if (reading?.bytesPerSecond === 0) return await closed;
    const chunks: Buffer[] = [];
    for await (const chunk of req) {
      chunks.push(chunk as Buffer);
      if (reading && !(await sleep(((chunk as Buffer).length * 1000) / reading.bytesPerSecond, gone.signal))) return;
    }
    const headers = new Headers();
    for (let i = 0; i + 1 < req.rawHeaders.length; i += 2)
      headers.append(defined(req.rawHeaders[i]), defined(req.rawHeaders[i + 1]));
    const method = req.method ?? 'GET';
    const request = new Request(new URL(reading?.url ?? req.url ?? '/', `http://${req.headers.host ?? '127.0.0.1'}`), {
      method,
      headers,
      body: method === 'GET' || method === 'HEAD' ? undefined : Buffer.concat(chunks),
      signal: gone.signal,
    });
    const response = await fake.fetch(request);
    if (res.destroyed) {
      await response.body?.cancel().catch(() => {});
      return;
    }
    const outHeaders: Record<string, string> = {};
    response.headers.forEach((value, name) => (outHeaders[name] = value));
    res.writeHead(response.status, outHeaders);
    if (response.body === null) {
      res.end();
      return;
    }
    res.flushHeaders();
    const reader = response.body.getReader();
    res.once('close', () => void reader.cancel().catch(() => {}));
    let lastWrite: Promise<void> = Promise.resolve();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        if (res.destroyed) return;
        let drained = true;
        lastWrite = new Promise<void>((resolve) => {
          drained = res.write(value, () => resolve());
        });
        if (!drained) {
          await new Promise<void>((resolve) => {
            const go = (): void => {
              res.off('drain', go);
              res.off('close', go);
              resolve();
            };
            res.on('drain', go);
            res.on('close', go);
          });
        }
      }
      res.end();
    } catch {
      // A cut: let the chunks already written reach the client, then drop the connection without
      // the chunked body's terminator, as a crashed upstream or a broken proxy would.
      await Promise.race([lastWrite, closed]);
      res.destroy();
    }
  } catch (error) {
    if (!res.headersSent) {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          error: {
            message: `fake upstream failed: ${String(error)}`,
            type: 'fake_upstream_bug',
            param: null,
            code: null,
          },
        }),
      );
    } else {
      res.destroy();
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Hostile readers (issue 34, F5): a provider that reads the request's body slowly or not at all

/**
 * How a request's body is read, from its path (see the header), and the path without the prefix
 * that says so: `bytesPerSecond` 0 for never; null for at once, as usual.
 */
function hostileReading(url: string): { bytesPerSecond: number; url: string } | null {
  const unread = /^\/unread(\/.*)$/.exec(url);
  if (unread) return { bytesPerSecond: 0, url: defined(unread[1]) };
  const slow = /^\/slow-read\/([1-9]\d*)(\/.*)$/.exec(url);
  return slow ? { bytesPerSecond: Number(slow[1]), url: defined(slow[2]) } : null;
}

// ---------------------------------------------------------------------------------------------
// As a script

async function runAsScript(): Promise<void> {
  const script = typeof process === 'undefined' ? undefined : process.argv?.[1];
  if (!script || !/fake-upstream\.[cm]?[jt]s$/.test(script)) return;
  const { pathToFileURL } = await import('node:url');
  const { resolve } = await import('node:path');
  if (pathToFileURL(resolve(script)).href !== import.meta.url) return;
  const args = process.argv.slice(2);
  const flag = (name: string): string | undefined => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : undefined;
  };
  const port = Number(flag('--port') ?? 0);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--port: not a port: ${flag('--port')}`);
  const apiKey = flag('--api-key');
  const fake = await startFakeUpstream({
    port,
    host: flag('--host') ?? '127.0.0.1',
    record: false,
    ...(apiKey ? { apiKey } : {}),
  });
  process.stdout.write(`${fake.url}\n`);
  // Started with an IPC channel (a test running the fake in a process of its own): answers how
  // many of its exchanges are still open.
  process.on('message', (message) => {
    if (message === 'open exchanges') process.send?.({ openExchanges: fake.inFlight });
  });
  const stop = (): void => void fake.close().then(() => process.exit(0));
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

void runAsScript().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
