/**
 * What a test has just established exists, or a failure saying it does not: where a `!` would let
 * an absent value travel on and fail later, somewhere that does not say why.
 */
export function defined<T>(value: T): NonNullable<T> {
  if (value === undefined || value === null) throw new Error(`Expected a value, found ${String(value)}.`);
  return value;
}
