import type pako from 'pako';

/**
 * What a document's compressed parts inflate to, counted before a library inflates them: a PDF's
 * FlateDecode streams and a DOCX's ZIP entries. The libraries (pdf.js, JSZip under mammoth) inflate
 * a part whole into memory and check its size only afterwards, so a 261 KB PDF whose one content
 * stream inflates to 256 MiB cost 400 MB, and a 1 MB one 1.5 GB, before anything could refuse it.
 * Here each part is inflated in pieces of PIECE_BYTES, each counted and dropped, and the count
 * stops one byte past what is allowed: the check holds a piece whatever the file says, and takes
 * at most the time of inflating the bound (about 1.5 s for 128 MiB here).
 *
 * pako (JavaScript, the inflater JSZip itself uses) rather than DecompressionStream: it runs the
 * same on both runtimes and stops at the end of a stream, where workerd's inflater fails a stream
 * followed by other bytes (a PDF's end of line before `endstream`, or bytes put there to hide a
 * bomb) before its output is read. Loaded on first use: only extraction inflates, which on Node is
 * the chunker process's work, not the server's.
 */
const loadPako = () => import('pako').then((module) => module.default);

/** pako's inflater (its type, which is all this module imports ahead of use). */
type Inflater = typeof pako.Inflate;

const PIECE_BYTES = 64 * 1024;
const PAST_LIMIT = Symbol('past the limit');

/**
 * The bytes `data` inflates to, up to `limit` (`limit + 1` when more). A stream that turns out
 * corrupt counts what it gave before: the library that reads it will refuse it on its own.
 */
export function inflatedSize(
  Inflater: Inflater,
  data: Uint8Array,
  format: 'deflate' | 'deflate-raw',
  limit: number,
): number {
  const inflater = new Inflater({ raw: format === 'deflate-raw', chunkSize: PIECE_BYTES });
  let size = 0;
  inflater.onData = (piece) => {
    size += piece.byteLength;
    if (size > limit) throw PAST_LIMIT;
  };
  inflater.onEnd = () => undefined;
  try {
    inflater.push(data, true);
  } catch (error) {
    if (error !== PAST_LIMIT) throw error;
    return limit + 1;
  }
  return size;
}

// ── PDF ───────────────────────────────────────────────────────────────────────────────────────

const STREAM = bytesOf('stream');
const END_STREAM = bytesOf('endstream');
const OBJ = bytesOf('obj');
/** How far before `stream` its dictionary is looked for. */
const DICTIONARY_BYTES = 4096;
const FIRST_FILTER_IS_FLATE = /\/Filter\s*(?:\[\s*)?\/(?:FlateDecode|Fl)\b/;
const IMAGE = /\/Subtype\s*\/Image\b/;

/**
 * The bytes a PDF's FlateDecode streams inflate to together, up to `limit` (`limit + 1` when
 * more). Images are left out: text extraction never decodes them. Streams are found as the
 * format writes them (`stream`, end of line, data, `endstream`); a stream whose first filter is
 * another (ASCII85 before Flate) is not counted here, and is bounded by the extraction's memory.
 */
export async function pdfInflatedBytes(pdf: Uint8Array, limit: number): Promise<number> {
  const { Inflate } = await loadPako();
  let total = 0;
  for (const { dictionary, data } of pdfStreams(pdf)) {
    if (!FIRST_FILTER_IS_FLATE.test(dictionary) || IMAGE.test(dictionary)) continue;
    total += inflatedSize(Inflate, data, 'deflate', limit - total);
    if (total > limit) return total;
  }
  return total;
}

function* pdfStreams(pdf: Uint8Array): Generator<{ dictionary: string; data: Uint8Array }> {
  for (let at = indexOf(pdf, STREAM, 0); at >= 0;) {
    const after = at + STREAM.length;
    // The keyword is followed by CRLF or LF (CR alone, from some writers); `endstream` is not one.
    const start =
      pdf[after] === 0x0d && pdf[after + 1] === 0x0a
        ? after + 2
        : pdf[after] === 0x0a || pdf[after] === 0x0d
          ? after + 1
          : -1;
    if (start < 0 || matches(pdf, END_STREAM, at - 3)) {
      at = indexOf(pdf, STREAM, after);
      continue;
    }
    const end = indexOf(pdf, END_STREAM, start);
    if (end < 0) return;
    // The end of line before `endstream` is not the stream's.
    const dataEnd =
      pdf[end - 1] === 0x0a ? (pdf[end - 2] === 0x0d ? end - 2 : end - 1) : pdf[end - 1] === 0x0d ? end - 1 : end;
    const from = Math.max(0, at - DICTIONARY_BYTES);
    const objAt = lastIndexOf(pdf, OBJ, from, at);
    yield {
      dictionary: String.fromCharCode(...pdf.subarray(objAt >= 0 ? objAt : from, at)),
      data: pdf.subarray(start, Math.max(start, dataEnd)),
    };
    at = indexOf(pdf, STREAM, end + END_STREAM.length);
  }
}

// ── ZIP (DOCX) ────────────────────────────────────────────────────────────────────────────────

export class ZipError extends Error {}

/**
 * The bytes a ZIP archive's entries inflate to together, up to `limit` (`limit + 1` when more),
 * read from its central directory (where the libraries read it too). A ZipError for what is not
 * a ZIP archive this reads, or has more than `maxEntries` entries.
 */
export async function zipInflatedBytes(zip: Uint8Array, limit: number, maxEntries: number): Promise<number> {
  const { Inflate } = await loadPako();
  const view = new DataView(zip.buffer, zip.byteOffset, zip.byteLength);
  const eocd = endOfCentralDirectory(view);
  if (eocd < 0) throw new ZipError('it is not a ZIP archive');
  const entries = view.getUint16(eocd + 10, true);
  let at = view.getUint32(eocd + 16, true);
  if (entries === 0xffff || at === 0xffffffff) throw new ZipError('it is a ZIP64 archive, which is not read');
  if (entries > maxEntries) throw new ZipError(`it has more than ${maxEntries} parts`);
  let total = 0;
  for (let entry = 0; entry < entries; entry++) {
    if (at + 46 > zip.byteLength || view.getUint32(at, true) !== 0x02014b50)
      throw new ZipError('its central directory is damaged');
    const method = view.getUint16(at + 10, true);
    const compressed = view.getUint32(at + 20, true);
    const local = view.getUint32(at + 42, true);
    at += 46 + view.getUint16(at + 28, true) + view.getUint16(at + 30, true) + view.getUint16(at + 32, true);
    if (local + 30 > zip.byteLength || view.getUint32(local, true) !== 0x04034b50)
      throw new ZipError('a part is missing');
    const start = local + 30 + view.getUint16(local + 26, true) + view.getUint16(local + 28, true);
    if (start + compressed > zip.byteLength) throw new ZipError('a part is cut short');
    // Stored parts are their size; deflated ones are counted as they inflate; others the library refuses.
    total +=
      method === 8
        ? inflatedSize(Inflate, zip.subarray(start, start + compressed), 'deflate-raw', limit - total)
        : compressed;
    if (total > limit) return limit + 1;
  }
  return total;
}

/** Where the end-of-central-directory record starts (it ends the archive, before a comment of at most 64 KiB); -1 if none. */
function endOfCentralDirectory(view: DataView): number {
  for (let at = view.byteLength - 22; at >= 0 && at >= view.byteLength - 22 - 0xffff; at--) {
    if (view.getUint32(at, true) === 0x06054b50) return at;
  }
  return -1;
}

// ── Bytes ─────────────────────────────────────────────────────────────────────────────────────

function bytesOf(text: string): Uint8Array {
  return new TextEncoder().encode(text);
}

/** The first `needle` in `haystack` at or after `from`; -1 if none. */
function indexOf(haystack: Uint8Array, needle: Uint8Array, from: number): number {
  const [first] = needle;
  if (first === undefined) return -1;
  for (let at = haystack.indexOf(first, from); at >= 0; at = haystack.indexOf(first, at + 1)) {
    if (matches(haystack, needle, at)) return at;
  }
  return -1;
}

/** The last `needle` in `haystack` starting in [from, before); -1 if none. */
function lastIndexOf(haystack: Uint8Array, needle: Uint8Array, from: number, before: number): number {
  for (let at = before - needle.length; at >= from; at--) {
    if (matches(haystack, needle, at)) return at;
  }
  return -1;
}

function matches(haystack: Uint8Array, needle: Uint8Array, at: number): boolean {
  if (at < 0 || at + needle.length > haystack.length) return false;
  for (let i = 0; i < needle.length; i++) if (haystack[at + i] !== needle[i]) return false;
  return true;
}
