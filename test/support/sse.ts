import { createParser } from 'eventsource-parser';

/** One server-sent event: its name, and its data as JSON (the raw text when it is not JSON, e.g. `[DONE]`). */
export interface StreamEvent {
  event: string;
  data: unknown;
}

/** A whole `text/event-stream` body, parsed by eventsource-parser (as the SDKs parse it: every line ending, multi-line data). */
export function parseEventStream(text: string): StreamEvent[] {
  const events: StreamEvent[] = [];
  const parser = createParser({
    onEvent: ({ event, data }) => {
      let parsed: unknown = data;
      try {
        parsed = JSON.parse(data);
      } catch {
        // Not JSON (`[DONE]`): kept as text, for the schema to judge.
      }
      events.push({ event: event ?? 'message', data: parsed });
    },
  });
  parser.feed(text);
  parser.reset({ consume: true });
  return events;
}

/** The text of a run's answer in its events: the text of its `thread.message.delta` events' parts, joined. */
export function deltaText(events: StreamEvent[]): string {
  return events
    .filter((event) => event.event === 'thread.message.delta')
    .map((event) =>
      (event.data as { delta: { content: { text?: { value?: string } }[] } }).delta.content
        .map((part) => part.text?.value ?? '')
        .join(''),
    )
    .join('');
}
