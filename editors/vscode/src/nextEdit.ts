// The server's `memosight/nextEdit` answer turned into a proposal the editor can show and apply:
// validation, which edit comes next from the cursor, whether it fits as ghost text, what the
// decoration says, and where the other edits move when one is applied. No `vscode` import: the
// view (nextEditView.ts) passes plain positions and a text reader.

export const NEXT_EDIT_REQUEST = 'memosight/nextEdit';

/** A zero-based line and UTF-16 column, as LSP and VS Code count them. */
export interface Pos {
  line: number;
  character: number;
}

export interface Span {
  start: Pos;
  end: Pos;
}

/** One edit of the server's answer. */
export interface ProposedEdit {
  range: Span;
  newText: string;
}

/** The server's answer, validated: the edits in document order (malformed ones left out). */
export interface NextEditAnswer {
  edits: ProposedEdit[];
  reason: string | null;
  source: string | null;
}

/** An edit with the text it replaces, read from the document the answer was computed for. */
export interface HeldEdit extends ProposedEdit {
  oldText: string;
}

/** What the editor shows: edits of one document version. */
export interface Proposal {
  uri: string;
  version: number;
  edits: HeldEdit[];
}

/** Reads the document's text in a span; undefined when the span is not inside the document. */
export type TextReader = (span: Span) => string | undefined;

const whole = (value: unknown): value is number => typeof value === 'number' && Number.isInteger(value) && value >= 0;
const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null;

function parsePos(raw: unknown): Pos | undefined {
  return isObject(raw) && whole(raw.line) && whole(raw.character) ? { line: raw.line, character: raw.character } : undefined;
}

export function comparePos(a: Pos, b: Pos): number {
  return a.line !== b.line ? a.line - b.line : a.character - b.character;
}

function parseSpan(raw: unknown): Span | undefined {
  if (!isObject(raw)) {
    return undefined;
  }
  const start = parsePos(raw.start);
  const end = parsePos(raw.end);
  return start && end && comparePos(start, end) <= 0 ? { start, end } : undefined;
}

/**
 * The answer if it has the documented shape; undefined when it has none. Edits that are malformed,
 * or overlap an earlier one, are left out rather than failing the whole answer: the rest still
 * make sense on their own.
 */
export function parseNextEdit(raw: unknown): NextEditAnswer | undefined {
  if (!isObject(raw) || !Array.isArray(raw.edits)) {
    return undefined;
  }
  const edits: ProposedEdit[] = [];
  for (const item of raw.edits as unknown[]) {
    const range = isObject(item) ? parseSpan(item.range) : undefined;
    if (!range || !isObject(item) || typeof item.newText !== 'string') {
      continue;
    }
    edits.push({ range, newText: item.newText });
  }
  edits.sort((a, b) => comparePos(a.range.start, b.range.start));
  const separate = edits.filter((edit, i) => i === 0 || comparePos(edits[i - 1].range.end, edit.range.start) <= 0);
  return {
    edits: separate,
    reason: typeof raw.reason === 'string' ? raw.reason : null,
    source: typeof raw.source === 'string' ? raw.source : null,
  };
}

/** The proposal for the document the answer was computed for, or undefined when nothing in it
 * would change the text (an edit outside the document, or one that rewrites text as it is). */
export function holdProposal(uri: string, version: number, answer: NextEditAnswer, read: TextReader): Proposal | undefined {
  const edits: HeldEdit[] = [];
  for (const edit of answer.edits) {
    const oldText = read(edit.range);
    if (oldText !== undefined && oldText !== edit.newText) {
      edits.push({ ...edit, oldText });
    }
  }
  return edits.length > 0 ? { uri, version, edits } : undefined;
}

/** Whether every edit's range still holds the text it was proposed to replace. */
export function stillHolds(proposal: Proposal, read: TextReader): boolean {
  return proposal.edits.every((edit) => read(edit.range) === edit.oldText);
}

/** The edit Tab applies: the first one that ends at or after the cursor, else (all are above it)
 * the first in the document. */
export function nextIndex(proposal: Proposal, cursor: Pos): number {
  const after = proposal.edits.findIndex((edit) => comparePos(edit.range.end, cursor) >= 0);
  return after >= 0 ? after : 0;
}

/** Where a position moves when `span` is replaced by `newText`; undefined when it was inside the
 * replaced span (it has no place in the new text). Positions at the span's end move with it. */
export function mapPos(pos: Pos, span: Span, newText: string): Pos | undefined {
  if (comparePos(pos, span.start) <= 0) {
    return pos;
  }
  if (comparePos(pos, span.end) < 0) {
    return undefined;
  }
  const end = endOf(span.start, newText);
  if (pos.line === span.end.line) {
    return { line: end.line, character: end.character + (pos.character - span.end.character) };
  }
  return { line: pos.line + (end.line - span.end.line), character: pos.character };
}

/** The position after `text` inserted at `start`. */
export function endOf(start: Pos, text: string): Pos {
  const lines = text.split(/\r\n|\r|\n/);
  const last = lines[lines.length - 1];
  return lines.length === 1
    ? { line: start.line, character: start.character + last.length }
    : { line: start.line + lines.length - 1, character: last.length };
}

/**
 * The proposal after its edit `index` was applied: the other edits moved to where their text is
 * now, for the new document version. An edit that touched the applied one is dropped (its text
 * changed under it).
 */
export function afterApplying(proposal: Proposal, index: number, version: number): Proposal | undefined {
  const applied = proposal.edits[index];
  const edits: HeldEdit[] = [];
  proposal.edits.forEach((edit, i) => {
    if (i === index) {
      return;
    }
    const start = mapPos(edit.range.start, applied.range, applied.newText);
    const end = mapPos(edit.range.end, applied.range, applied.newText);
    if (start && end) {
      edits.push({ ...edit, range: { start, end } });
    }
  });
  return edits.length > 0 ? { uri: proposal.uri, version, edits } : undefined;
}

/**
 * The ghost text that shows the edit at the cursor, or undefined when it does not fit as one:
 * the edit must be on the cursor's line, cover the cursor, keep the text before the cursor in its
 * range, and only add text between that and the text after the cursor. Then the inline item
 * replaces the edit's range with its new text and VS Code draws exactly the added text.
 */
export function inlineAt(edit: HeldEdit, cursor: Pos): { range: Span; insertText: string } | undefined {
  const { start, end } = edit.range;
  if (start.line !== cursor.line || end.line !== cursor.line || edit.newText.includes('\n') || edit.oldText.includes('\n')) {
    return undefined;
  }
  if (start.character > cursor.character || end.character < cursor.character) {
    return undefined;
  }
  const before = edit.oldText.slice(0, cursor.character - start.character);
  const after = edit.oldText.slice(cursor.character - start.character);
  const fits =
    edit.newText.length > edit.oldText.length && edit.newText.startsWith(before) && edit.newText.endsWith(after);
  return fits ? { range: edit.range, insertText: edit.newText } : undefined;
}

/** One line of the new text as the decoration after the old text shows it: line breaks as ⏎. */
export function shownText(newText: string, maxLength = 80): string {
  const flat = newText.replace(/\r\n|\r|\n/g, ' ⏎ ');
  return flat.length > maxLength ? `${flat.slice(0, maxLength - 1)}…` : flat;
}

/** The hint after the edit Tab applies: what the key does there. */
export function hintText(jumpFirst: boolean, more: number): string {
  const rest = more > 0 ? ` (${more} more)` : '';
  return jumpFirst ? `  Tab to jump here${rest}, Esc to dismiss` : `  Tab to apply${rest}, Esc to dismiss`;
}

/** Whether Tab first moves the cursor to the edit: when its line is not on screen, applying
 * there unseen would surprise; the second Tab applies it in view. */
export function jumpFirst(edit: HeldEdit, visible: readonly Span[]): boolean {
  return !visible.some((span) => span.start.line <= edit.range.start.line && edit.range.start.line <= span.end.line);
}

/** The debounce after an edit, from the setting (a bad value gives the default). */
export function debounceMs(raw: unknown, fallback = 500): number {
  return typeof raw === 'number' && Number.isFinite(raw) && raw >= 0 ? Math.min(raw, 60_000) : fallback;
}
