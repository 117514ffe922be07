/**
 * The patterns of a virtual key's `models`: exact model names, or globs where `*` matches any run
 * of characters (none included) and every other character matches itself, case-sensitively
 * (`gpt-4o*`, `llama3.*`, `*-mini`, `*`).
 *
 * A run that names no virtual key goes to the key whose pattern matches its model most
 * specifically:
 *   - an exact name beats every glob;
 *   - between globs, the one with more literal characters (the characters other than `*`) wins:
 *     `gpt-4o-*` (7) beats `gpt-4o*` (6), which beats `gpt-*` (4) and `*` (0).
 * A key's best matching pattern is what counts for it. Two patterns of different keys with the same
 * specificity that some model could match both (`gpt*` and `*-4o` both match `gpt-4o`) would make a
 * tie, so a key's patterns must not conflict with another key's (`conflicts`), which is checked
 * whenever a key's `models` are written; resolution then never meets a tie.
 */

/** Exact names rank above every glob; globs by their literal characters. */
export function specificity(pattern: string): number {
  return isGlob(pattern) ? pattern.length - countStars(pattern) : Number.POSITIVE_INFINITY;
}

export function isGlob(pattern: string): boolean {
  return pattern.includes('*');
}

/** Whether `pattern` matches `model` (the whole of it). */
export function matches(pattern: string, model: string): boolean {
  if (!isGlob(pattern)) return pattern === model;
  const parts = pattern.split('*');
  // A glob has a star, so it splits in two parts at least.
  const first = parts[0] ?? '';
  const last = parts.at(-1) ?? '';
  if (model.length < first.length + last.length || !model.startsWith(first) || !model.endsWith(last)) return false;
  // The parts between stars, each found leftmost after the previous one: for `*`-only globs the
  // leftmost choice never loses a match that a later one would allow.
  let at = first.length;
  const end = model.length - last.length;
  for (const part of parts.slice(1, -1)) {
    const found = model.indexOf(part, at);
    if (found < 0 || found + part.length > end) return false;
    at = found + part.length;
  }
  return true;
}

/**
 * Whether some model matches both patterns. Two globs share a model exactly when their literal
 * prefixes (before the first `*`) agree, one extending the other, and so do their literal suffixes
 * (after the last `*`): the model `<longer prefix><every middle part of both><longer suffix>` then
 * matches both, and any model matching both starts with both prefixes and ends with both suffixes.
 */
export function overlap(a: string, b: string): boolean {
  if (!isGlob(a)) return matches(b, a);
  if (!isGlob(b)) return matches(a, b);
  const [prefixA, suffixA] = globEnds(a);
  const [prefixB, suffixB] = globEnds(b);
  const prefixes = prefixA.startsWith(prefixB) || prefixB.startsWith(prefixA);
  const suffixes = suffixA.endsWith(suffixB) || suffixB.endsWith(suffixA);
  return prefixes && suffixes;
}

/** Whether two patterns of different keys could tie: the same specificity, and a model they both match. */
export function conflicts(a: string, b: string): boolean {
  return specificity(a) === specificity(b) && overlap(a, b);
}

/** A model that both patterns match, to show in a conflict's message (`overlap` must hold). */
export function sharedModel(a: string, b: string): string {
  if (!isGlob(a)) return a;
  if (!isGlob(b)) return b;
  const [prefixA, suffixA] = globEnds(a);
  const [prefixB, suffixB] = globEnds(b);
  const prefix = prefixA.length >= prefixB.length ? prefixA : prefixB;
  const suffix = suffixA.length >= suffixB.length ? suffixA : suffixB;
  const middle = (pattern: string) => pattern.split('*').slice(1, -1).join('');
  return prefix + middle(a) + middle(b) + suffix;
}

/** The literal text before the first `*` and after the last one. */
export function globEnds(glob: string): [string, string] {
  return [glob.slice(0, glob.indexOf('*')), glob.slice(glob.lastIndexOf('*') + 1)];
}

function countStars(pattern: string): number {
  let stars = 0;
  for (const character of pattern) if (character === '*') stars++;
  return stars;
}

/**
 * Of the patterns a workspace's keys serve, the model name closest to `model`, for a request whose
 * model none of them matches (a typo: `gpt4o` for `gpt-4o*`): a glob stands for its literal text
 * (`gpt-4o*` for `gpt-4o`), and a candidate counts when at most a third of `model`'s characters
 * (at least two) must change, and not all of them. Null when none is that close. Bounded: patterns are at most 256
 * characters, and a workspace's keys hold at most a few thousand of them.
 */
export function closestModel(model: string, patterns: readonly string[]): string | null {
  const limit = Math.max(2, Math.floor(model.length / 3));
  let best: { name: string; distance: number } | null = null;
  for (const pattern of patterns) {
    const name = pattern.replaceAll('*', '');
    if (name === '' || Math.abs(name.length - model.length) > limit) continue;
    const distance = editDistance(model, name, limit);
    // A candidate changed whole is no suggestion (`o3` for a two-letter name).
    if (
      distance <= limit &&
      distance < Math.max(model.length, name.length) &&
      (best === null || distance < best.distance)
    )
      best = { name, distance };
  }
  return best?.name ?? null;
}

/** Levenshtein distance, or `limit + 1` once it must exceed `limit` (the row's least value does). */
function editDistance(a: string, b: string, limit: number): number {
  // Each row is written from 0 to b.length in order, so every index read holds a number.
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(
        (previous[j] ?? 0) + 1,
        (row[j - 1] ?? 0) + 1,
        (previous[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1),
      );
    }
    if (Math.min(...row) > limit) return limit + 1;
    previous = row;
  }
  return previous[b.length] ?? 0;
}
