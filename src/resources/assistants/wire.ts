import { toUnixSeconds } from '../../lib/time';
import type { AssistantObject } from './objects';
import type { AssistantRow } from '../../db/schema';

/** OpenAI's Assistant object, from its row: every field, defaults filled. */
export function toAssistantJson(row: AssistantRow): AssistantObject {
  return {
    id: row.id,
    object: 'assistant',
    created_at: toUnixSeconds(row.createdAt),
    name: row.name,
    description: row.description,
    model: row.model,
    instructions: row.instructions,
    tools: row.tools,
    metadata: row.metadata,
    tool_resources: row.toolResources ?? {},
    temperature: row.temperature ?? 1,
    top_p: row.topP ?? 1,
    response_format: row.responseFormat ?? 'auto',
  };
}
