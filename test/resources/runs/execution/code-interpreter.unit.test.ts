import { describe, expect, it } from 'vitest';
import {
  codeOf,
  codeOutput,
  filePaths,
  MAX_OUTPUT_CHARS,
  unshownImages,
} from '../../../../src/resources/runs/execution/code-interpreter';

/** The pure parts of code_interpreter: the code of a call's arguments, the text the model is given back. */

describe('codeOf', () => {
  it.each([
    ['{"code":"print(1)"}', { code: 'print(1)' }],
    ['print(1)', { code: 'print(1)' }],
    ['{"code":"  "}', { problem: expect.stringContaining('No code') }],
    ['{"source":"print(1)"}', { problem: expect.stringContaining('No code') }],
    ['', { problem: expect.stringContaining('No code') }],
  ])('%s', (args, expected) => expect(codeOf(args)).toEqual(expected));
});

describe('codeOutput', () => {
  it('gives the logs, the exception once, and a line per file saved or not', () => {
    const traceback = 'Traceback (most recent call last):\nZeroDivisionError: division by zero\n';
    expect(
      codeOutput(
        { status: 'error', logs: traceback, error: { name: 'ZeroDivisionError', value: 'division by zero' } },
        [
          { kind: 'image', path: 'image.png', fileId: 'file-1' },
          { kind: 'file', path: 'out.csv', problem: 'quota' },
        ],
      ),
    ).toBe(
      `${traceback.trimEnd()}\nImage shown to the user as file-1.\nFile /mnt/data/out.csv saved: not stored (quota).`,
    );
  });

  it('cuts long logs, says when the session was reset, and says when nothing was printed', () => {
    const long = codeOutput({ status: 'ok', logs: 'x'.repeat(MAX_OUTPUT_CHARS + 10) }, []);
    expect(long).toBe(`${'x'.repeat(MAX_OUTPUT_CHARS)}\n[output cut]`);
    expect(codeOutput({ status: 'timeout', logs: '', reason: 'wall time' }, [])).toContain('stopped (wall time)');
    expect(codeOutput({ status: 'ok', logs: '' }, [])).toBe('The code ran and printed nothing.');
  });
});

describe('filePaths', () => {
  it('annotates the links to files the run wrote, in UTF-16 indices, without a sentence’s period, and no other', () => {
    const text = 'Voilà [a](sandbox:/mnt/data/a.csv) and sandbox:/mnt/data/b.csv, sandbox:/mnt/data/sub/c.txt.';
    const files = new Map([
      ['a.csv', 'file-a'],
      ['sub/c.txt', 'file-c'],
    ]);
    expect(filePaths(text, files)).toEqual([
      {
        type: 'file_path',
        text: 'sandbox:/mnt/data/a.csv',
        start_index: text.indexOf('sandbox:/mnt/data/a.csv'),
        end_index: text.indexOf('sandbox:/mnt/data/a.csv') + 23,
        file_path: { file_id: 'file-a' },
      },
      {
        type: 'file_path',
        text: 'sandbox:/mnt/data/sub/c.txt',
        start_index: text.indexOf('sandbox:/mnt/data/sub'),
        end_index: text.length - 1,
        file_path: { file_id: 'file-c' },
      },
    ]);
  });
});

describe('unshownImages', () => {
  const message = { stepDetails: { type: 'message_creation' as const, message_creation: { message_id: 'msg_1' } } };
  const code = (...images: string[]) => ({
    stepDetails: {
      type: 'tool_calls' as const,
      tool_calls: [
        {
          id: 'call_1',
          type: 'code_interpreter' as const,
          code_interpreter: {
            input: 'x',
            outputs: [
              { type: 'logs' as const, logs: 'x' },
              ...images.map((fileId) => ({ type: 'image' as const, image: { file_id: fileId } })),
            ],
          },
          function: { name: 'python', arguments: '{}', output: '' },
        },
      ],
    },
  });

  it.each([
    ['no steps', [], []],
    [
      'the figures of every code call since the run began, in order',
      [code('a', 'b'), code(), code('c')],
      ['a', 'b', 'c'],
    ],
    ['only those after the last message', [code('a'), message, code('b')], ['b']],
    ['none once a message followed them', [code('a'), message], []],
  ])('%s', (_, steps, expected) => {
    expect(unshownImages(steps)).toEqual(expected);
  });
});
