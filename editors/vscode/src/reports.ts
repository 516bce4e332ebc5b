// Markdown for the read-only "context" and "stats" documents. No `vscode` import.

export interface Position {
  line: number;
  character: number;
}

export interface Range {
  start: Position;
  end: Position;
}

export interface ContextSnippet {
  uri: string;
  range: Range;
  symbol: string | null;
  kind: string | null;
  tokens: number;
}

/** Result of the `memosight/context` request. */
export interface ContextResult {
  promptTokens: number;
  snippets: ContextSnippet[];
  prompt: string;
  reason: string | null;
}

/** A fence longer than any backtick run in `text`, so the prompt shows verbatim. */
function fence(text: string): string {
  const longest = Math.max(2, ...Array.from(text.matchAll(/`+/g), (m) => m[0].length));
  return '`'.repeat(longest + 1);
}

export function formatContext(result: ContextResult, uri: string, position: Position): string {
  const lines: string[] = [
    '# MemoSight context',
    '',
    `Document: ${uri}  `,
    `Position: line ${position.line + 1}, column ${position.character + 1}  `,
    `Prompt tokens: ${result.promptTokens}`,
    '',
  ];
  if (result.reason) {
    lines.push(`**No completion here:** ${result.reason}`, '');
  }
  lines.push(`## Snippets (${result.snippets.length})`, '');
  if (result.snippets.length === 0) {
    lines.push('(none)');
  }
  for (const s of result.snippets) {
    const where = `${s.uri}:${s.range.start.line + 1}-${s.range.end.line + 1}`;
    const what = [s.kind, s.symbol].filter((part) => part).join(' ');
    lines.push(`- ${what ? `${what} — ` : ''}${where} (${s.tokens} tokens)`);
  }
  const f = fence(result.prompt);
  lines.push('', '## Prompt', '', f, result.prompt, f, '');
  return lines.join('\n');
}

function formatValue(value: unknown): string {
  if (typeof value === 'number') {
    return Number.isInteger(value) ? String(value) : value.toFixed(2);
  }
  if (value === null || value === undefined) {
    return '—';
  }
  return typeof value === 'object' ? JSON.stringify(value) : String(value);
}

/** A table of the `memosight/stats` result, known keys first, the rest as the server sent them. */
export function formatStats(stats: Record<string, unknown>): string {
  const known: [string, string][] = [
    ['requests', 'Requests'],
    ['modelCalls', 'Model calls'],
    ['typeThroughHits', 'Type-through hits'],
    ['p50Ms', 'Latency p50 (ms)'],
    ['p95Ms', 'Latency p95 (ms)'],
    ['meanTokens', 'Mean tokens per completion'],
  ];
  const lines = ['# MemoSight stats', '', '| Metric | Value |', '| --- | --- |'];
  const seen = new Set<string>();
  for (const [key, label] of known) {
    if (key in stats) {
      lines.push(`| ${label} | ${formatValue(stats[key])} |`);
      seen.add(key);
    }
  }
  for (const [key, value] of Object.entries(stats)) {
    if (!seen.has(key)) {
      lines.push(`| ${key} | ${formatValue(value)} |`);
    }
  }
  lines.push('');
  return lines.join('\n');
}
