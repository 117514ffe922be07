import { defined } from './defined';
/** A streamed response's server-sent events, read as the SDKs read them. */

export interface ServerSentEvent {
  event: string;
  data: any;
}

/** Reads a streamed response's events as they arrive; `onEvent` sees each one. Answers them all. */
export async function readEvents(
  response: Response,
  onEvent: (event: ServerSentEvent) => void = () => {},
): Promise<ServerSentEvent[]> {
  const seen: ServerSentEvent[] = [];
  const reader = defined(response.body).pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return seen;
    buffer += value;
    let end: number;
    while ((end = buffer.indexOf('\n\n')) !== -1) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const event = /^event: (.*)$/m.exec(block)?.[1] ?? 'message';
      const data = /^data: (.*)$/m.exec(block)?.[1] ?? '';
      const parsed = { event, data: data === '[DONE]' ? data : JSON.parse(data) };
      seen.push(parsed);
      onEvent(parsed);
    }
  }
}
