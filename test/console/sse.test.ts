import { createParser } from 'eventsource-parser';
import { describe, expect, it } from 'vitest';
import { eventParser, serverEvents, type ServerEvent } from '../../src/console/client/sse';

/**
 * The console's event-stream parser (src/console/client/sse.ts) against eventsource-parser, the
 * library the server and the tests parse with: the same events from the same text, however the
 * text is cut between reads.
 */

function reference(text: string): ServerEvent[] {
  const events: ServerEvent[] = [];
  const parser = createParser({ onEvent: ({ event, data }) => events.push({ event: event ?? 'message', data }) });
  parser.feed(text);
  return events;
}

const STREAMS: Record<string, string> = {
  'a run, as the gateway streams it':
    'event: thread.run.created\ndata: {"id":"run_1","status":"queued"}\n\n' +
    'event: thread.message.delta\ndata: {"delta":{"content":[{"index":0,"type":"text","text":{"value":"Hé "}}]}}\n\n' +
    'event: done\ndata: [DONE]\n\n',
  'data over several lines': 'event: note\ndata: first\ndata:second\ndata:  third\n\n',
  // Not ending in a CR: eventsource-parser holds a last CR, in case a LF follows, where this parser ends the line.
  'CRLF and CR line ends': 'event: a\r\ndata: one\r\n\r\nevent: b\rdata: two\r\r: tail\r\n',
  'comments, unknown fields, id and retry': ': ping\n\nid: 7\nretry: 100\nfoo: bar\ndata: x\n\n',
  'an event without data, and a field without a colon': 'event: empty\n\ndata\n\nevent: last\ndata: 😀 ünïcode\n\n',
  'an unfinished event at the end': 'data: done\n\ndata: cut off',
};

describe("the console's event-stream parser", () => {
  for (const [name, text] of Object.entries(STREAMS)) {
    it(`reads ${name} as eventsource-parser does, cut anywhere`, () => {
      const expected = reference(text);
      expect(expected.length).toBeGreaterThan(0);
      const whole = eventParser();
      expect(whole(text)).toEqual(expected);
      for (let cut = 0; cut <= text.length; cut++) {
        const parse = eventParser();
        expect([...parse(text.slice(0, cut)), ...parse(text.slice(cut))], `cut at ${cut}`).toEqual(expected);
      }
      // A character at a time: every line end and every field split.
      const parse = eventParser();
      expect([...text].flatMap((character) => parse(character))).toEqual(expected);
    });
  }

  it('decodes a character whose bytes are split between reads', async () => {
    const bytes = new TextEncoder().encode('event: t\ndata: 😀é\n\n');
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        for (const byte of bytes) controller.enqueue(Uint8Array.of(byte));
        controller.close();
      },
    });
    const events: ServerEvent[] = [];
    for await (const event of serverEvents(body)) events.push(event);
    expect(events).toEqual([{ event: 't', data: '😀é' }]);
  });
});
