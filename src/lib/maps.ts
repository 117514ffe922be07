/**
 * Deletes the oldest entry of `map` (a Map iterates in the order keys were first set): the bound of
 * a small cache that forgets what it learned first.
 */
export function deleteOldest<K, V>(map: Map<K, V>): void {
  for (const key of map.keys()) {
    map.delete(key);
    return;
  }
}
