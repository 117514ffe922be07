import { SEARCH_LIMITS } from '../../vector-stores/search-schemas';

/** Queries one file_search call may make. */
export const MAX_QUERIES = 5;

const INVALID = 'The arguments were not valid JSON. Call file_search with {"queries": ["..."]}.';
const NONE = 'No query was given. Call file_search with {"queries": ["..."]}.';

// Where the reader is: what it expects next.
const VALUE = 0;
/** Right after `[`: a value or `]`. */
const VALUE_OR_END = 1;
/** Right after `{`: a key or `}`. */
const KEY_OR_END = 2;
const KEY = 3;
const COLON = 4;
const AFTER_VALUE = 5;
const STRING = 6;
const NUMBER = 7;
const LITERAL = 8;
const INVALID_JSON = 9;

// Inside a number: the part read last. The terminal ones (a number may end there) are odd.
const MINUS = 0;
const ZERO = 1;
const DOT = 2;
const INTEGER = 3;
const E = 4;
const FRACTION = 5;
const E_SIGN = 6;
const EXPONENT = 7;

const OBJECT = 1;
const ARRAY = 2;

const JSON_WHITESPACE = new Set([' ', '\t', '\n', '\r']);
const ESCAPES: Record<string, string> = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };
/** The characters a string holds as they are, up to its end, an escape or a character JSON forbids there. */
const PLAIN = /[^"\\\u0000-\u001f]*/y;
const HEX = /^[0-9a-fA-F]$/;

/** A string's text as searchQueries keeps it: trimmed, then its first SEARCH_LIMITS.queryChars UTF-16 units. */
class BoundedText {
  #kept = '';
  /** Whether anything but whitespace came after the kept text (then its end is not trimmed). */
  #more = false;

  add(piece: string): void {
    if (this.#more) return;
    const rest = this.#kept === '' ? piece.trimStart() : piece;
    const room = SEARCH_LIMITS.queryChars - this.#kept.length;
    this.#kept += rest.slice(0, room);
    if (rest.length > room && /\S/.test(rest.slice(room))) this.#more = true;
  }

  /** The text, '' when the string was blank. */
  text(): string {
    return this.#more ? this.#kept : this.#kept.trimEnd();
  }
}

/**
 * A file_search call's arguments read as they stream, fragment by fragment: what searchQueries
 * answers for them whole, `{"queries": [...]}` (or `{"query": "..."}`), without joining or parsing
 * them whole. A model may send megabytes of arguments a call; parsing them at the round's end took
 * tens of milliseconds of one event-loop turn per call, and their copies a major GC. Here each
 * fragment is read as it arrives (in the slice that reads it), and what is held is bounded: the
 * kept queries and one bit a level of nesting.
 *
 * It accepts exactly what JSON.parse accepts, and a key given twice counts as its last value, as
 * there.
 */
export class SearchArguments {
  #state = VALUE;
  /** The containers open, OBJECT or ARRAY a level (grown as needed: nesting is bounded by the arguments' size). */
  #stack = new Uint8Array(16);
  #depth = 0;
  #topIsObject: boolean | null = null;
  // In a string:
  /** Whether it is a key, and of the top object (whose `queries` and `query` matter). */
  #key: 'top' | 'nested' | null = null;
  /** After a backslash: -1, then the \u escape's hex digits read (0 to 4); null outside an escape. */
  #escape: number | null = null;
  #hex = '';
  /** The top object's key read so far, cut past the length of `queries`. */
  #keyText = '';
  /** Where its text is kept, if it is a query (of `queries`, or `query`). */
  #text: BoundedText | null = null;
  // In a number or a literal:
  #number = MINUS;
  #literal = '';
  /** The top object's key whose value comes next: 'queries', 'query', or another (''). */
  #field = '';
  /** The last `queries` of the top object: its strings kept (up to MAX_QUERIES not blank), or 'other' when not an array. */
  #queries: string[] | 'other' | null = null;
  /** Whether the array open at depth 2 is the top object's `queries`. */
  #inQueries = false;
  /** The last `query` of the top object: its text, or 'other' when not a string. */
  #query: BoundedText | 'other' | null = null;

  /** Reads the next fragment of the arguments. */
  push(fragment: string): void {
    let i = 0;
    while (i < fragment.length && this.#state !== INVALID_JSON) {
      if (this.#state === STRING) {
        i = this.#inString(fragment, i);
        continue;
      }
      const char = fragment.charAt(i);
      if (this.#state === NUMBER) {
        if (this.#inNumber(char)) i++;
        continue;
      }
      if (this.#state === LITERAL) {
        if (char === this.#literal.charAt(0)) {
          this.#literal = this.#literal.slice(1);
          if (this.#literal === '') this.#endValue();
        } else this.#state = INVALID_JSON;
        i++;
        continue;
      }
      i++;
      if (JSON_WHITESPACE.has(char)) continue;
      this.#structural(char);
    }
  }

  /**
   * The queries, bounded as searchQueries bounds them, or the message for the model when there
   * are none or the arguments were not JSON.
   */
  queries(): string[] | { problem: string } {
    const ended = this.#state === AFTER_VALUE || (this.#state === NUMBER && this.#number % 2 === 1);
    if (!ended || this.#depth > 0) return { problem: INVALID };
    if (!this.#topIsObject) return { problem: NONE };
    const queries = Array.isArray(this.#queries)
      ? this.#queries
      : this.#query instanceof BoundedText
        ? [this.#query.text()].filter((query) => query !== '')
        : [];
    return queries.length > 0 ? queries : { problem: NONE };
  }

  /** A character outside strings, numbers and literals, not whitespace. */
  #structural(char: string): void {
    const state = this.#state;
    if (state === KEY_OR_END || state === KEY) {
      if (char === '"') this.#openString(this.#depth === 1 ? 'top' : 'nested', null);
      else if (char === '}' && state === KEY_OR_END) this.#close(OBJECT);
      else this.#state = INVALID_JSON;
    } else if (state === COLON) {
      this.#state = char === ':' ? VALUE : INVALID_JSON;
    } else if (state === AFTER_VALUE) {
      const open = this.#depth === 0 ? 0 : this.#stack[this.#depth - 1];
      if (char === ',' && open !== 0) this.#state = open === OBJECT ? KEY : VALUE;
      else if (char === '}' && open === OBJECT) this.#close(OBJECT);
      else if (char === ']' && open === ARRAY) this.#close(ARRAY);
      else this.#state = INVALID_JSON;
    } else if (char === ']' && state === VALUE_OR_END) {
      this.#close(ARRAY);
    } else {
      this.#value(char);
    }
  }

  /** The first character of a value. */
  #value(char: string): void {
    if (this.#depth === 0) this.#topIsObject = char === '{';
    const field = this.#depth === 1 ? this.#field : '';
    if (field === 'queries') this.#queries = char === '[' ? [] : 'other';
    if (field === 'query') this.#query = char === '"' ? new BoundedText() : 'other';
    if (char === '{' || char === '[') {
      if (this.#depth === 1) this.#inQueries = field === 'queries' && char === '[';
      this.#open(char === '{' ? OBJECT : ARRAY);
    } else if (char === '"') {
      const query =
        this.#inQueries && this.#depth === 2 && Array.isArray(this.#queries) && this.#queries.length < MAX_QUERIES;
      this.#openString(null, field === 'query' ? this.#query : query ? new BoundedText() : null);
    } else if (char === '-' || (char >= '0' && char <= '9')) {
      this.#state = NUMBER;
      this.#number = char === '-' ? MINUS : char === '0' ? ZERO : INTEGER;
    } else {
      const literal = ['true', 'false', 'null'].find((word) => word.charAt(0) === char);
      if (literal === undefined) return void (this.#state = INVALID_JSON);
      this.#state = LITERAL;
      this.#literal = literal.slice(1);
    }
  }

  #open(kind: number): void {
    if (this.#depth === this.#stack.length) {
      const grown = new Uint8Array(this.#stack.length * 2);
      grown.set(this.#stack);
      this.#stack = grown;
    }
    this.#stack[this.#depth++] = kind;
    this.#state = kind === OBJECT ? KEY_OR_END : VALUE_OR_END;
  }

  #close(kind: number): void {
    if (this.#stack[this.#depth - 1] !== kind) return void (this.#state = INVALID_JSON);
    this.#depth--;
    if (this.#depth === 1) this.#inQueries = false;
    this.#endValue();
  }

  #endValue(): void {
    this.#state = AFTER_VALUE;
  }

  #openString(key: 'top' | 'nested' | null, text: BoundedText | 'other' | null): void {
    this.#state = STRING;
    this.#key = key;
    this.#keyText = '';
    this.#text = text instanceof BoundedText ? text : null;
  }

  /** Reads a string's characters from `i`: answers where it stopped. */
  #inString(fragment: string, i: number): number {
    if (this.#escape === null) {
      PLAIN.lastIndex = i;
      PLAIN.test(fragment);
      const end = PLAIN.lastIndex;
      if (end > i) this.#add(fragment.slice(i, end));
      if (end === fragment.length) return end;
      const char = fragment.charAt(end);
      if (char === '"') this.#endString();
      else if (char === '\\') this.#escape = -1;
      else this.#state = INVALID_JSON;
      return end + 1;
    }
    const char = fragment.charAt(i);
    if (this.#escape === -1) {
      const escaped = ESCAPES[char];
      if (char === 'u') {
        this.#escape = 0;
        this.#hex = '';
      } else if (escaped !== undefined) {
        this.#escape = null;
        this.#add(escaped);
      } else this.#state = INVALID_JSON;
      return i + 1;
    }
    if (!HEX.test(char)) {
      this.#state = INVALID_JSON;
      return i + 1;
    }
    this.#hex += char;
    if (this.#hex.length === 4) {
      this.#escape = null;
      this.#add(String.fromCharCode(Number.parseInt(this.#hex, 16)));
    }
    return i + 1;
  }

  #add(piece: string): void {
    if (this.#key === 'top') {
      // Only whether it is `queries` or `query` matters: a longer key is cut past that.
      if (this.#keyText.length <= 'queries'.length)
        this.#keyText += piece.slice(0, 'queries'.length + 1 - this.#keyText.length);
    } else this.#text?.add(piece);
  }

  #endString(): void {
    if (this.#key !== null) {
      if (this.#key === 'top') this.#field = this.#keyText;
      this.#state = COLON;
      return;
    }
    // A string of `queries` is kept if it is not blank; `query`'s text stays where it is (#query).
    const text = this.#inQueries && this.#depth === 2 ? this.#text?.text() : undefined;
    if (text && Array.isArray(this.#queries)) this.#queries.push(text);
    this.#text = null;
    this.#endValue();
  }

  /** A character in a number: answers whether it was the number's (false: the number ended before it). */
  #inNumber(char: string): boolean {
    const digit = char >= '0' && char <= '9';
    const state = this.#number;
    if (digit) {
      if (state === ZERO) return this.#fail();
      this.#number =
        state === MINUS
          ? char === '0'
            ? ZERO
            : INTEGER
          : state === DOT
            ? FRACTION
            : state === E || state === E_SIGN
              ? EXPONENT
              : state;
      return true;
    }
    if (char === '.' && (state === ZERO || state === INTEGER)) this.#number = DOT;
    else if ((char === 'e' || char === 'E') && (state === ZERO || state === INTEGER || state === FRACTION))
      this.#number = E;
    else if ((char === '+' || char === '-') && state === E) this.#number = E_SIGN;
    else if (state % 2 === 1) {
      this.#endValue();
      return false;
    } else return this.#fail();
    return true;
  }

  #fail(): boolean {
    this.#state = INVALID_JSON;
    return true;
  }
}
