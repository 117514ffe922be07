import type { convert, HtmlToTextOptions } from 'html-to-text';

/**
 * A file's format, and the text of the formats read without a document library: UTF-8 text (plain
 * text, Markdown, JSON, source code) as it is, HTML without its markup. What a message's file
 * takes (resources/conversations/items.ts), apart from extract.ts's PDF and DOCX readers, whose
 * libraries (pdf.js, mammoth: most of a megabyte gzipped) the gateway Worker's bundle must not
 * carry: wrangler bundles even a dynamic import's module, so only a module never imported stays out.
 * HTML's library comes from the caller (HtmlToText), so that the gateway Worker loads it as a
 * module of its own, only when a message's HTML file is read.
 */

/**
 * html-to-text, loaded when it is first needed: `import('html-to-text')` on Node and in the ingest
 * Worker; in the gateway Worker its own module (Deps.libraries, runtime/workers/lazy/), which the
 * Worker's script does not carry.
 */
export type HtmlToText = () => Promise<{ convert: typeof convert }>;

export type FileFormat = 'text' | 'html' | 'pdf' | 'docx';

export class ExtractionError extends Error {
  constructor(
    readonly code: 'unsupported_file' | 'invalid_file',
    message: string,
  ) {
    super(message);
    this.name = 'ExtractionError';
  }
}

/** Extensions of UTF-8 text files: OpenAI's file_search list, and a few more of the same kind. */
const TEXT_EXTENSIONS = new Set([
  'txt',
  'md',
  'markdown',
  'json',
  'jsonl',
  'csv',
  'tsv',
  'xml',
  'yaml',
  'yml',
  'toml',
  'ini',
  'log',
  'rst',
  'tex',
  'c',
  'h',
  'cc',
  'cpp',
  'hpp',
  'cs',
  'css',
  'go',
  'java',
  'js',
  'mjs',
  'cjs',
  'jsx',
  'ts',
  'tsx',
  'php',
  'py',
  'rb',
  'rs',
  'sh',
  'bash',
  'sql',
  'swift',
  'kt',
  'scala',
  'lua',
  'pl',
  'r',
  'vue',
  'svelte',
]);

const MEDIA_TYPES: Record<string, FileFormat> = {
  'text/html': 'html',
  'application/xhtml+xml': 'html',
  'application/pdf': 'pdf',
  'application/vnd.openxmlformats-officedocument.wordprocessingml.document': 'docx',
  'application/json': 'text',
  'application/xml': 'text',
  'application/javascript': 'text',
  'application/x-sh': 'text',
  'application/x-yaml': 'text',
};

/** The format of a file named `filename`, uploaded as `contentType`; null when none is supported. */
export function formatOf(filename: string, contentType: string | null): FileFormat | null {
  const extension = /\.([A-Za-z0-9]+)$/.exec(filename)?.[1]?.toLowerCase();
  if (extension === 'html' || extension === 'htm' || extension === 'xhtml') return 'html';
  if (extension === 'pdf') return 'pdf';
  if (extension === 'docx') return 'docx';
  if (extension !== undefined && TEXT_EXTENSIONS.has(extension)) return 'text';
  const mediaType = contentType?.split(';')[0]?.trim().toLowerCase();
  if (!mediaType) return null;
  return MEDIA_TYPES[mediaType] ?? (mediaType.startsWith('text/') ? 'text' : null);
}

/** html-to-text's options: block structure kept (headings, lists, table rows), links and images left out. */
const HTML_OPTIONS: HtmlToTextOptions = {
  wordwrap: false,
  selectors: [
    { selector: 'a', options: { ignoreHref: true } },
    { selector: 'img', format: 'skip' },
    { selector: 'h1', options: { uppercase: false } },
    { selector: 'h2', options: { uppercase: false } },
    { selector: 'h3', options: { uppercase: false } },
    { selector: 'table', format: 'dataTable', options: { uppercaseHeaderCells: false } },
  ],
};

/** The text of a UTF-8 or HTML file, at most `maxChars` long and not blank (an ExtractionError otherwise). */
export async function extractText(
  bytes: Uint8Array,
  format: 'text' | 'html',
  maxChars: number,
  htmlToText: HtmlToText,
): Promise<string> {
  return checkedText(await readText(bytes, format, htmlToText), format, maxChars);
}

/** A file's text as read, or an ExtractionError when it is longer than `maxChars` or blank. */
export function checkedText(text: string, format: FileFormat, maxChars: number): string {
  if (text.length > maxChars) {
    throw new ExtractionError(
      'invalid_file',
      `The file's text is longer than ${maxChars} characters, the most a file may index.`,
    );
  }
  if (text.trim() === '') {
    const why = format === 'pdf' ? ' (a PDF of scanned pages has no text layer to read)' : '';
    throw new ExtractionError('invalid_file', `The file has no text to index${why}.`);
  }
  return text;
}

export async function readText(bytes: Uint8Array, format: 'text' | 'html', htmlToText: HtmlToText): Promise<string> {
  if (format === 'text') return utf8(bytes);
  const html = utf8(bytes);
  try {
    return (await htmlToText()).convert(html, HTML_OPTIONS);
  } catch (error) {
    throw new ExtractionError('invalid_file', `The HTML file cannot be read: ${describe(error)}.`);
  }
}

function utf8(bytes: Uint8Array): string {
  try {
    // ignoreBOM false (the default) is spelled out: the Workers types require both options.
    return new TextDecoder('utf-8', { fatal: true, ignoreBOM: false }).decode(bytes);
  } catch {
    throw new ExtractionError('invalid_file', 'The file is not valid UTF-8 text.');
  }
}

/** A library's error, bounded: it may quote the file. A stack overflow is the document's nesting. */
export function describe(error: unknown): string {
  if (error instanceof RangeError && /call stack/i.test(error.message)) return 'its elements are nested too deeply';
  const message = error instanceof Error ? error.message : String(error);
  return message.length > 200 ? `${message.slice(0, 200)}…` : message;
}
