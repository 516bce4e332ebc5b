// The server's `memosight/completionUpdated`: a suggestion shown early (what the model had verified
// by `completion.firstResponseMs`) grew once decoding ended. Where the user has changed nothing
// since (same document version, cursor still there, no selection), the editor asks again and
// shows the whole suggestion without another keystroke. No `vscode` import.

export const COMPLETION_UPDATED = 'memosight/completionUpdated';

/** Params of the notification, validated. */
export interface CompletionUpdate {
  uri: string;
  version: number | null;
  line: number;
  character: number;
}

/** Where the user is now, as the refresh decision sees it. */
export interface EditorState {
  uri: string;
  version: number;
  line: number;
  character: number;
  /** The selection is empty (a cursor, not a range). */
  empty: boolean;
}

const whole = (value: unknown): value is number => typeof value === 'number' && Number.isInteger(value) && value >= 0;

/** The update if it has the documented shape; undefined otherwise (a bad message is ignored). */
export function parseUpdate(raw: unknown): CompletionUpdate | undefined {
  if (typeof raw !== 'object' || raw === null) {
    return undefined;
  }
  const r = raw as Record<string, unknown>;
  const doc = r.textDocument as Record<string, unknown> | undefined;
  const pos = r.position as Record<string, unknown> | undefined;
  if (typeof doc !== 'object' || doc === null || typeof doc.uri !== 'string') {
    return undefined;
  }
  if (typeof pos !== 'object' || pos === null || !whole(pos.line) || !whole(pos.character)) {
    return undefined;
  }
  return { uri: doc.uri, version: whole(doc.version) ? doc.version : null, line: pos.line, character: pos.character };
}

/** Whether asking again shows the grown suggestion where the user still is. */
export function stillThere(update: CompletionUpdate, editor: EditorState | undefined): boolean {
  return (
    editor !== undefined &&
    editor.empty &&
    editor.uri === update.uri &&
    (update.version === null || editor.version === update.version) &&
    editor.line === update.line &&
    editor.character === update.character
  );
}
