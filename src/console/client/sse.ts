/**
 * `text/event-stream` as the HTML standard defines it, for the playground's streamed runs: lines end
 * at CRLF, LF or CR (a CRLF may be split between two reads), `data` lines join with a newline, a
 * comment (`:`) is skipped, one space after the colon is dropped, an event ends at an empty line
 * and one without data is no event. `id` and `retry` are read by EventSource's reconnection, which
 * a fetch has not: they are skipped. Hand-written rather than eventsource-parser (the server's,
 * which test/console/sse.test.ts checks it against) for the console's budget: a fifth of its bytes.
 */

export interface ServerEvent {
  event: string;
  data: string;
}

/** A parser to feed text as it arrives; each call answers the events its text completed. */
export function eventParser(): (text: string) => ServerEvent[] {
  let rest = '';
  let afterCarriageReturn = false;
  let event = '';
  let data: string[] | null = null;
  return (text) => {
    if (text === '') return [];
    if (afterCarriageReturn && text.startsWith('\n')) text = text.slice(1);
    afterCarriageReturn = text.endsWith('\r');
    const lines = (rest + text).split(/\r\n|\r|\n/);
    rest = lines.pop() ?? '';
    const events: ServerEvent[] = [];
    for (const line of lines) {
      if (line === '') {
        if (data) events.push({ event: event || 'message', data: data.join('\n') });
        event = '';
        data = null;
        continue;
      }
      const colon = line.indexOf(':');
      if (colon === 0) continue;
      const name = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? '' : line.slice(colon + (line[colon + 1] === ' ' ? 2 : 1));
      if (name === 'event') event = value;
      else if (name === 'data') (data ??= []).push(value);
    }
    return events;
  };
}

/** A body's events as its bytes arrive (a character split between reads is decoded whole). */
export async function* serverEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<ServerEvent, void, undefined> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const parse = eventParser();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      yield* parse(decoder.decode(value, { stream: true }));
    }
  } finally {
    // A reader that stops early (the page left) lets the connection go.
    await reader.cancel();
  }
}
