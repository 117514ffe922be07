import type { StoredChatCompletionRow } from '../../db/schema';
import { ApiError } from '../../errors';
import { isRecord } from '../../providers/chat';
import type { StoredMessageObject } from './objects';
import type { ListStoredMessagesQuery } from './schemas';

/**
 * A stored completion as the API answers it: the provider's object as it was kept (not checked
 * against objects.ts's schema, as the answer to the create was not), with its id and metadata.
 */
export function toStoredCompletionJson(row: StoredChatCompletionRow) {
  return { ...row.completion, id: row.id, metadata: row.metadata };
}

/** The message at `index` of a stored completion's request, with OpenAI's fields (objects.ts). */
function toStoredMessageJson(
  completionId: string,
  message: StoredChatCompletionRow['messages'][number],
  index: number,
): StoredMessageObject {
  const { content } = message;
  const parts = Array.isArray(content) ? content : null;
  const texts = parts?.flatMap((part) => (isRecord(part) && typeof part.text === 'string' ? [part.text] : []));
  return {
    ...message,
    id: `${completionId}-${index}`,
    content: typeof content === 'string' ? content : texts && texts.length > 0 ? texts.join('\n') : null,
    name: typeof message.name === 'string' ? message.name : null,
    content_parts: parts,
  };
}

/**
 * One page of a stored completion's messages (the request's, in its order), as db/pagination.ts
 * pages a list: `after` is one of its messages' ids (else 400 naming `after`), one more tells
 * whether more follow. The messages are the row's: a page is a slice of them.
 */
export function storedMessagePage(row: StoredChatCompletionRow, query: ListStoredMessagesQuery) {
  const messages = row.messages.map((message, index) => toStoredMessageJson(row.id, message, index));
  if (query.order === 'desc') messages.reverse();
  let start = 0;
  if (query.after !== undefined) {
    start = messages.findIndex((message) => message.id === query.after) + 1;
    if (start === 0) {
      throw new ApiError('invalid_value', `Invalid 'after': no message found with id '${query.after}'.`, {
        param: 'after',
      });
    }
  }
  return { rows: messages.slice(start, start + query.limit), hasMore: messages.length > start + query.limit };
}
