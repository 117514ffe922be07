import { ApiError } from '../../errors';
import type { ThreadMessageInput } from '../threads/schemas';

/**
 * A response's `input` as the thread takes it: its messages, and the outputs of function calls an
 * earlier response made. Each keeps the index of its item, which errors name (`input[3]`).
 */
export interface ResponseInput {
  messages: { message: ThreadMessageInput; index: number }[];
  outputs: { callId: string; output: string; index: number }[];
}

export function readInput(input: string | Record<string, unknown>[] | undefined): ResponseInput {
  if (input === undefined) return { messages: [], outputs: [] };
  if (typeof input === 'string')
    return { messages: [{ message: { role: 'user', content: input }, index: 0 }], outputs: [] };
  const read: ResponseInput = { messages: [], outputs: [] };
  input.forEach((item, index) => {
    const type = item.type ?? 'message';
    if (type === 'function_call_output') {
      const { call_id: callId, output } = item;
      if (typeof callId !== 'string' || callId === '')
        throw new ApiError('missing_required_parameter', 'A function_call_output needs its call_id.', {
          param: `input[${index}].call_id`,
        });
      if (typeof output !== 'string')
        throw new ApiError('invalid_type', 'A function_call_output needs its output as a string.', {
          param: `input[${index}].output`,
        });
      read.outputs.push({ callId, output, index });
      return;
    }
    if (type !== 'message')
      throw new ApiError('invalid_value', `Input items of type '${String(type)}' are not supported.`, {
        param: `input[${index}].type`,
      });
    const role = item.role;
    if (role !== 'user' && role !== 'assistant')
      throw new ApiError('invalid_value', `Messages of role '${String(role)}' are not supported.`, {
        param: `input[${index}].role`,
      });
    const content = item.content;
    if (typeof content === 'string') {
      read.messages.push({ message: { role, content }, index });
      return;
    }
    if (!Array.isArray(content))
      throw new ApiError('invalid_type', 'A message needs content: a string or parts.', {
        param: `input[${index}].content`,
      });
    const parts = content.map((part: unknown, at) => {
      const text = typeof part === 'object' && part !== null && 'text' in part ? part.text : undefined;
      if (typeof text !== 'string')
        throw new ApiError('invalid_value', 'Only text parts are supported here.', {
          param: `input[${index}].content[${at}]`,
        });
      return { type: 'text' as const, text };
    });
    read.messages.push({ message: { role, content: parts }, index });
  });
  return read;
}
