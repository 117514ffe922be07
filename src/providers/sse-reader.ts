import { UpstreamError } from './types';

/**
 * Reads an upstream `text/event-stream` body incrementally and yields each event's data, without
 * ever holding more than one unfinished event. Handles `\n` and `\r\n`, multi-line `data:` fields,
 * comments (`: keep-alive`), and chunk boundaries anywhere, including inside a UTF-8 character.
 */
export async function* readServerSentData(
  body: ReadableStream<Uint8Array>,
  onChunk?: () => void,
): AsyncGenerator<string> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let data: string[] = [];
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      onChunk?.();
      buffer += decoder.decode(value, { stream: true });
      let newline: number;
      while ((newline = buffer.indexOf('\n')) !== -1) {
        let line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 1);
        if (line.endsWith('\r')) line = line.slice(0, -1);
        if (line === '') {
          if (data.length > 0) yield data.join('\n');
          data = [];
        } else if (line.startsWith('data:')) {
          data.push(line.charCodeAt(5) === 32 ? line.slice(6) : line.slice(5));
        }
        // Other fields (event:, id:, retry:) and comments carry nothing Chat Completions uses.
      }
      if (buffer.length > 1_048_576) {
        throw new UpstreamError('protocol', 'The upstream sent a server-sent event line longer than 1 MiB.');
      }
    }
    buffer += decoder.decode();
    if (buffer.startsWith('data:')) data.push(buffer.slice(buffer.charCodeAt(5) === 32 ? 6 : 5).trimEnd());
    if (data.length > 0) yield data.join('\n');
  } finally {
    // Also when the consumer stops early: cancelling closes the upstream connection.
    await reader.cancel().catch(() => undefined);
  }
}
