import { defined } from './defined';
import { readFileSync } from 'node:fs';

/** Reading a run's event stream, and the event order of a real OpenAI run stream (test/fixtures). */

export interface ParsedEvent {
  event: string;
  data: unknown;
}

/** The events of a whole `text/event-stream` body, their data parsed (`[DONE]` left as it is). */
export function parseEvents(text: string): ParsedEvent[] {
  return text
    .split('\n\n')
    .filter((block) => block.startsWith('event: '))
    .map((block) => {
      const [eventLine, dataLine] = block.split('\n');
      const data = defined(dataLine).slice('data: '.length);
      return { event: defined(eventLine).slice('event: '.length), data: data === '[DONE]' ? data : JSON.parse(data) };
    });
}

/** Repeated delta events count once: how many deltas depends on the answer. */
export function collapse(events: string[]): string[] {
  return events.filter((event, i) => !(event.endsWith('.delta') && events[i - 1] === event));
}

/** The event names of example N of a real OpenAI run stream (test/fixtures), deltas collapsed. */
export function referenceOrder(example: number): string[] {
  const text = readFileSync(new URL('../fixtures/openai-run-stream-example.txt', import.meta.url), 'utf8');
  const section = defined(text.split(/# =+ EXAMPLE \d/)[example]);
  const names = section
    .split('\n')
    .filter((line) => line.startsWith('event: '))
    .map((line) => line.slice('event: '.length))
    // The SDK consumes `done` itself; it never reaches the 'event' listener.
    .filter((name) => name !== 'done');
  return collapse(names);
}
