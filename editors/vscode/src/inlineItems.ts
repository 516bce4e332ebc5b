// The inline provider's answer with one more item in front (the next edit's ghost text). Every
// item of the server's answer is kept, in its order: the server may send several alternatives
// (`completion.alternatives`), which VS Code cycles with Alt+] / Alt+[. No `vscode` import.

/** An inline completion answer as VS Code takes it: a list, an array, or nothing. */
export type InlineResult<T> = T[] | { items: T[] } | null | undefined;

export function withExtraItem<T, R extends InlineResult<T>>(result: R, extra: T | undefined): R | T[] {
  if (extra === undefined) {
    return result;
  }
  if (!result) {
    return [extra];
  }
  if (Array.isArray(result)) {
    return [extra, ...result];
  }
  // A list (InlineCompletionList): keep the object (and whatever else it carries), items in front.
  result.items = [extra, ...result.items];
  return result;
}
