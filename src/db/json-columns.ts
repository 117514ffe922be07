import * as z from 'zod';

/**
 * The shapes of the JSON columns (db/schema.ts types its columns by them), and the zod schemas
 * that the resources validate requests with where a column stores a request's field as it came:
 * tools and response formats (assistants, runs), tool choices (runs), tool resources (assistants,
 * threads, runs); and what runs record of their own (steps' details, required actions, errors).
 * Here, below the resources, because the tables need them; they depend on zod alone. Shapes follow
 * OpenAI's AssistantToolsCode / AssistantToolsFileSearch / AssistantToolsFunction,
 * AssistantsApiResponseFormatOption and AssistantsApiToolChoiceOption in its Assistants v2 OpenAPI schemas.
 */

/** JSON Schemas and other free-form objects nest at most this deep (a bound on recursion everywhere). */
export const MAX_JSON_DEPTH = 32;

function withinDepth(value: unknown, limit: number): boolean {
  const stack: [unknown, number][] = [[value, 1]];
  for (let next = stack.pop(); next !== undefined; next = stack.pop()) {
    const [current, depth] = next;
    if (current === null || typeof current !== 'object') continue;
    if (depth > limit) return false;
    for (const child of Object.values(current)) stack.push([child, depth + 1]);
  }
  return true;
}

/** A free-form JSON object (a JSON Schema, say), bounded in depth. */
export const jsonObject = z.record(z.string(), z.unknown()).refine((value) => withinDepth(value, MAX_JSON_DEPTH), {
  error: `must not nest deeper than ${MAX_JSON_DEPTH} levels.`,
});

/** a-z, A-Z, 0-9, underscores and dashes, at most 64: OpenAI's rule for function and schema names. */
export const functionName = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[a-zA-Z0-9_-]+$/, { error: 'only a-z, A-Z, 0-9, underscores and dashes are allowed.' });

export const functionTool = z.strictObject({
  type: z.literal('function'),
  function: z.strictObject({
    name: functionName,
    description: z.string().max(16_384).optional(),
    parameters: jsonObject.optional(),
    strict: z.boolean().nullable().optional(),
  }),
});

export const codeInterpreterTool = z.strictObject({ type: z.literal('code_interpreter') });

export const fileSearchTool = z.strictObject({
  type: z.literal('file_search'),
  file_search: z
    .strictObject({
      max_num_results: z.int().min(1).max(50).optional(),
      ranking_options: z
        .strictObject({
          ranker: z.enum(['auto', 'default_2024_08_21']).optional(),
          score_threshold: z.number().min(0).max(1),
        })
        .optional(),
    })
    .optional(),
});

export const toolSchema = z.discriminatedUnion('type', [codeInterpreterTool, fileSearchTool, functionTool]);
export type Tool = z.infer<typeof toolSchema>;

/**
 * Tools, at most `max`, with no function name twice: a model could not tell two same-named
 * functions apart, and Chat Completions providers refuse them. Shared with run overrides.
 */
export const toolsSchema = (max: number) =>
  z
    .array(toolSchema)
    .max(max)
    .superRefine((tools, ctx) => {
      const seen = new Map<string, number>();
      tools.forEach((tool, index) => {
        if (tool.type !== 'function') return;
        const first = seen.get(tool.function.name);
        if (first !== undefined) {
          ctx.addIssue({
            code: 'custom',
            path: [index, 'function', 'name'],
            message: `Invalid 'tools[${index}].function.name': the function '${tool.function.name}' is already defined by tools[${first}].`,
          });
        } else seen.set(tool.function.name, index);
      });
    });

export type FunctionTool = z.infer<typeof functionTool>;

/**
 * `auto` (default) and `none`, OpenAI's `{"type":"text"}`, JSON mode
 * `{"type":"json_object"}` and Structured Outputs `{"type":"json_schema","json_schema":{…}}`.
 */
export const responseFormatSchema = z.union([
  z.enum(['auto', 'none']),
  z.discriminatedUnion('type', [
    z.strictObject({ type: z.literal('text') }),
    z.strictObject({ type: z.literal('json_object') }),
    z.strictObject({
      type: z.literal('json_schema'),
      json_schema: z.strictObject({
        name: functionName,
        description: z.string().max(16_384).optional(),
        schema: jsonObject.optional(),
        strict: z.boolean().nullable().optional(),
      }),
    }),
  ]),
]);
export type ResponseFormat = z.infer<typeof responseFormatSchema>;

/** `none`, `auto` (default), `required`, or a named tool to force. */
export const toolChoiceSchema = z.union([
  z.enum(['none', 'auto', 'required']),
  z
    .strictObject({
      type: z.enum(['function', 'code_interpreter', 'file_search']),
      function: z.strictObject({ name: functionName }).optional(),
    })
    .refine((choice) => choice.type !== 'function' || choice.function !== undefined, {
      error: 'A tool_choice of type \'function\' must name the function: {"type":"function","function":{"name":"…"}}.',
      path: ['function'],
    }),
]);
export type ToolChoice = z.infer<typeof toolChoiceSchema>;

/**
 * Tool resources, the files and vector stores an assistant's, a thread's or a run's tools use
 * (code_interpreter, file_search).
 */
const fileIds = z.array(z.string().min(1).max(256)).max(20);
const vectorStoreIds = z.array(z.string().min(1).max(256)).max(1);

export const toolResourcesSchema = z.strictObject({
  code_interpreter: z.strictObject({ file_ids: fileIds.optional() }).optional(),
  file_search: z.strictObject({ vector_store_ids: vectorStoreIds.optional() }).optional(),
});
export type ToolResources = z.infer<typeof toolResourcesSchema>;

// ── What runs record ─────────────────────────────────────────────────────────────────────────

/** A run's truncation strategy as stored and answered: `last_messages` is null unless its type says so. */
export interface TruncationStrategy {
  type: 'auto' | 'last_messages';
  last_messages: number | null;
}

/** A function call the model made, with the client's output once submitted. */
export interface FunctionToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string; output: string | null };
}

/** A chunk the file_search tool found, with its text (answered only when `include[]` asks for it). */
export interface FileSearchResult {
  file_id: string;
  file_name: string;
  score: number;
  content: { type: 'text'; text: string }[];
}

/**
 * A file search the gateway ran for the model. `function` is never answered (resources/runs/wire.ts): it is
 * the call as the model made it (the gateway's search function) and the text the model was given
 * back, so that later turns send the model what it saw, as for a function call.
 */
export interface FileSearchToolCall {
  id: string;
  type: 'file_search';
  file_search: {
    ranking_options: { ranker: 'auto' | 'default_2024_08_21'; score_threshold: number };
    results: FileSearchResult[];
  };
  function: { name: string; arguments: string; output: string };
}

/** What a code_interpreter call showed: its logs, and each figure as a file (purpose `assistants_output`). */
export type CodeInterpreterOutput = { type: 'logs'; logs: string } | { type: 'image'; image: { file_id: string } };

/**
 * Code the gateway ran for the model in the thread's sandbox (resources/runs/execution/code-interpreter.ts).
 * As a file search's, `function` is the gateway's own and never answered (resources/runs/wire.ts): the
 * call as the model made it and the text it was given back (logs, error, files saved). `files`,
 * also the gateway's own, are the files the code wrote under /mnt/data and the ids they were stored
 * as: the answer's `sandbox:/mnt/data/…` links become their `file_path` annotations.
 */
export interface CodeInterpreterToolCall {
  id: string;
  type: 'code_interpreter';
  /** The container it ran in (resources/containers/): a response's code_interpreter_call item shows it. */
  container_id?: string;
  code_interpreter: { input: string; outputs: CodeInterpreterOutput[] };
  function: { name: string; arguments: string; output: string };
  files?: { path: string; file_id: string }[];
}

export type ToolCall = FunctionToolCall | FileSearchToolCall | CodeInterpreterToolCall;

/** What a run step did: created a message, or called tools. */
export type StepDetails =
  | { type: 'message_creation'; message_creation: { message_id: string } }
  | { type: 'tool_calls'; tool_calls: ToolCall[] };

export type ToolCallsDetails = Extract<StepDetails, { type: 'tool_calls' }>;

/** What a run in requires_action waits for: an output for each of these calls. */
export interface RequiredAction {
  type: 'submit_tool_outputs';
  submit_tool_outputs: {
    tool_calls: { id: string; type: 'function'; function: { name: string; arguments: string } }[];
  };
}

/** Why a run or a step failed, as clients see it. */
export interface RunError {
  code: string;
  message: string;
}

/**
 * What a run's execution knew of it that its other columns do not hold (runs.trace): its log
 * line's note and the provider calls it made, each attempt of each (a retry, a fallback key). Ids,
 * counts and times only, never content or a secret; every list and text bounded (runs/execution/trace.ts).
 */
export interface RunTrace {
  /** The slug of the virtual key that answered the run's last call (a fallback's, when its own failed); null: the run's own. */
  virtual_key: string | null;
  /** Milliseconds from the start of the run's last turn to the provider's first token, if one came. */
  time_to_first_token_ms: number | null;
  /** Why the run failed, in a word (`dns`, `timeout`, `http_401`, …), when it did. */
  cause: string | null;
  /** The last attempts made (at most MAX_TRACE_ATTEMPTS), oldest first. */
  attempts: ProviderAttempt[];
  /** Attempts made in all, those left out of `attempts` included. */
  attempts_total: number;
}

/** One attempt at a provider call of a run. */
export interface ProviderAttempt {
  /** When it began (ms since the epoch). */
  at_ms: number;
  /** The slug of the virtual key it was made with. */
  virtual_key: string;
  /** The model asked of the provider. */
  model: string;
  /** `ok`, or how it failed (the metrics' words: `http_5xx`, `timeout`, `network`, `aborted`, `incomplete`…); null while it is open. */
  outcome: string | null;
  /** The provider's HTTP status, when its answer began. */
  status: number | null;
  /** Milliseconds from its start to the provider's status and headers, when they came. */
  first_byte_ms: number | null;
  /** Milliseconds from its start to its end, once it ended. */
  duration_ms: number | null;
}

/** Why a run ended incomplete: one of its token caps. */
export interface RunIncompleteDetails {
  reason: 'max_completion_tokens' | 'max_prompt_tokens';
}

/** The request's fields a response answers as given, kept in its row's `options`. */
export interface ResponseOptions {
  instructions?: string | null;
  tools?: { type: string; [field: string]: unknown }[];
  tool_choice?: string | { type: string; [field: string]: unknown };
  text?: { format?: { type: string }; verbosity?: string | null } | null;
  reasoning?: { summary?: string | null } | null;
  truncation?: 'auto' | 'disabled' | null;
  user?: string | null;
  safety_identifier?: string | null;
  prompt?: { id: string } | null;
  prompt_cache_key?: string | null;
  service_tier?: string | null;
  top_logprobs?: number | null;
  max_tool_calls?: number | null;
  include?: string[] | null;
}
