import * as z from 'zod';

/**
 * Tools and response formats, shared by assistants and runs (tool resources are in
 * resources/vector-stores/schemas.ts). Shapes follow OpenAI's AssistantToolsCode /
 * AssistantToolsFileSearch / AssistantToolsFunction and AssistantsApiResponseFormatOption in its
 * Assistants v2 OpenAPI schemas.
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
export const jsonObject = z
  .record(z.string(), z.unknown())
  .refine((value) => withinDepth(value, MAX_JSON_DEPTH), {
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
 * Tool types that need OpenAI's hosted infrastructure and cannot run over Chat Completions
 * (file_search runs in the gateway: resources/runs/execution/file-search.ts).
 */
export const HOSTED_TOOL_TYPES = ['code_interpreter'] as const;

export const isHostedTool = (tool: Tool) => HOSTED_TOOL_TYPES.some((type) => type === tool.type);

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
