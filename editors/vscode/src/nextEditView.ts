// Next edits in the editor: after an edit and a pause, asks the server for the edit that comes
// next (`memosight/nextEdit`) and shows it, as ghost text when it is an insertion at the cursor,
// else as a decoration at its place (the old text struck through, the new text after it, a hint).
// `memosight.applyNextEdit` (Tab) applies it, jumping to it first when it is off screen;
// `memosight.dismissNextEdit` (Escape) drops it. The rules themselves live in nextEdit.ts.

import * as vscode from 'vscode';
import type { LanguageClient, Middleware } from 'vscode-languageclient/node';
import { SECTION } from './client';
import { withExtraItem } from './inlineItems';
import {
  afterApplying,
  debounceMs,
  endOf,
  hintText,
  holdProposal,
  inlineAt,
  jumpFirst,
  nextIndex,
  NEXT_EDIT_REQUEST,
  parseNextEdit,
  shownText,
  stillHolds,
  type Pos,
  type Proposal,
  type Span,
  type TextReader,
} from './nextEdit';

export const VISIBLE_CONTEXT = 'memosight.nextEditVisible';

/** Where the server last answered an inline completion with something to show. */
interface InlineShown {
  uri: string;
  version: number;
  line: number;
  character: number;
}

const toRange = (span: Span): vscode.Range =>
  new vscode.Range(span.start.line, span.start.character, span.end.line, span.end.character);
const toPos = (position: vscode.Position): Pos => ({ line: position.line, character: position.character });

/** The text of a span, or undefined when the span is not inside the document. */
function reader(document: vscode.TextDocument): TextReader {
  return (span) => {
    const range = toRange(span);
    return document.validateRange(range).isEqual(range) ? document.getText(range) : undefined;
  };
}

export class NextEditView implements vscode.Disposable {
  private proposal: Proposal | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private request: vscode.CancellationTokenSource | undefined;
  /** True while the extension applies an edit itself: that change does not drop the proposal. */
  private applying = false;
  private inlineShown: InlineShown | undefined;
  /** The proposal version and cursor the inline provider was last asked at for a next edit. */
  private inlineAskedAt: string | undefined;
  private decorated: vscode.TextEditor | undefined;
  private contextVisible = false;
  private readonly changed = new vscode.EventEmitter<Proposal | undefined>();
  private readonly subscriptions: vscode.Disposable[] = [];
  private readonly oldText = vscode.window.createTextEditorDecorationType({
    textDecoration: 'line-through',
    backgroundColor: new vscode.ThemeColor('diffEditor.removedTextBackground'),
  });
  private readonly newText = vscode.window.createTextEditorDecorationType({
    after: { backgroundColor: new vscode.ThemeColor('diffEditor.insertedTextBackground') },
  });
  private readonly hint = vscode.window.createTextEditorDecorationType({
    after: { color: new vscode.ThemeColor('editorCodeLens.foreground'), fontStyle: 'italic' },
  });

  /** Fires with the proposal now shown (undefined: none); for the e2e suite. */
  readonly onDidChange = this.changed.event;

  constructor(
    private readonly client: () => LanguageClient | undefined,
    private readonly output: vscode.LogOutputChannel,
  ) {
    this.subscriptions.push(
      vscode.workspace.onDidChangeTextDocument((event) => this.onDocumentChange(event)),
      vscode.window.onDidChangeTextEditorSelection((event) => {
        if (event.textEditor === vscode.window.activeTextEditor) {
          this.render();
        }
      }),
      vscode.window.onDidChangeActiveTextEditor(() => this.dismiss()),
      vscode.workspace.onDidChangeConfiguration((event) => {
        if (event.affectsConfiguration(`${SECTION}.nextEdit.enabled`) && !this.enabled()) {
          this.dismiss();
        }
      }),
    );
  }

  get current(): Proposal | undefined {
    return this.proposal;
  }

  dispose(): void {
    this.drop();
    this.changed.dispose();
    this.oldText.dispose();
    this.newText.dispose();
    this.hint.dispose();
    for (const subscription of this.subscriptions) {
      subscription.dispose();
    }
  }

  /** The inline provider's middleware: the server's items, all of them (Alt+] / Alt+[ cycle
   * through them), after the next edit's ghost text when the next edit is an insertion here. */
  readonly inlineMiddleware: NonNullable<Middleware['provideInlineCompletionItems']> = async (
    document,
    position,
    context,
    token,
    next,
  ) => {
    const own = this.inlineItem(document, position);
    const result = await next(document, position, context, token);
    const items = Array.isArray(result) ? result : result?.items ?? [];
    this.inlineShown =
      items.length > 0
        ? { uri: document.uri.toString(), version: document.version, line: position.line, character: position.character }
        : undefined;
    return withExtraItem(result, own);
  };

  /** Asks the server now (the automatic request waits for a pause after an edit). */
  async suggest(): Promise<Proposal | undefined> {
    this.cancelPending();
    return this.ask(false);
  }

  /**
   * Tab: applies the next edit from the cursor and puts the cursor at its end; when that edit is
   * off screen, the first press only moves the cursor to it (the second applies it in view).
   * The other edits of the proposal stay, moved to where their text now is.
   */
  async apply(): Promise<boolean> {
    const editor = vscode.window.activeTextEditor;
    const proposal = this.proposal;
    if (!editor || !proposal || !this.shownIn(editor, proposal) || !stillHolds(proposal, reader(editor.document))) {
      this.drop();
      return false;
    }
    const index = nextIndex(proposal, toPos(editor.selection.active));
    const edit = proposal.edits[index];
    const visible = editor.visibleRanges.map((range) => ({ start: toPos(range.start), end: toPos(range.end) }));
    if (jumpFirst(edit, visible)) {
      const start = toRange(edit.range).start;
      editor.selection = new vscode.Selection(start, start);
      editor.revealRange(toRange(edit.range), vscode.TextEditorRevealType.InCenterIfOutsideViewport);
      this.render();
      return true;
    }
    this.applying = true;
    let applied = false;
    try {
      applied = await editor.edit((builder) => builder.replace(toRange(edit.range), edit.newText));
    } finally {
      this.applying = false;
    }
    if (!applied) {
      this.drop();
      return false;
    }
    const end = endOf(edit.range.start, edit.newText);
    editor.selection = new vscode.Selection(end.line, end.character, end.line, end.character);
    const rest = afterApplying(proposal, index, editor.document.version);
    this.proposal = rest && stillHolds(rest, reader(editor.document)) ? rest : undefined;
    this.render();
    if (!this.proposal) {
      // The plan is done: what comes after it is the server's to say.
      this.schedule(editor.document);
    }
    return true;
  }

  /** Escape: drops the proposal (a new one comes after the next edit). */
  dismiss(): void {
    this.cancelPending();
    this.drop();
  }

  private enabled(): boolean {
    return vscode.workspace.getConfiguration(SECTION).get<boolean>('nextEdit.enabled', true);
  }

  private onDocumentChange(event: vscode.TextDocumentChangeEvent): void {
    if (event.contentChanges.length === 0 || this.applying) {
      return;
    }
    const uri = event.document.uri.toString();
    if (this.proposal?.uri === uri) {
      // Predicted from the text before this change: it may no longer be what comes next.
      this.drop();
    }
    if (event.document === vscode.window.activeTextEditor?.document) {
      this.schedule(event.document);
    }
  }

  /** After an edit: a request once the user pauses; further typing cancels it and waits again. */
  private schedule(document: vscode.TextDocument): void {
    this.cancelPending();
    if (!this.enabled() || (document.uri.scheme !== 'file' && document.uri.scheme !== 'untitled')) {
      return;
    }
    const wait = debounceMs(vscode.workspace.getConfiguration(SECTION).get('nextEdit.debounceMs'));
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.ask(true);
    }, wait);
  }

  private cancelPending(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    this.request?.cancel();
    this.request?.dispose();
    this.request = undefined;
  }

  private async ask(automatic: boolean): Promise<Proposal | undefined> {
    const editor = vscode.window.activeTextEditor;
    const client = this.client();
    if (!editor || !client) {
      return undefined;
    }
    const document = editor.document;
    const version = document.version;
    const cursor = editor.selection.active;
    if (automatic && this.inlineShownAt(editor)) {
      return undefined;
    }
    const source = new vscode.CancellationTokenSource();
    this.request = source;
    let raw: unknown;
    try {
      raw = await client.sendRequest<unknown>(
        NEXT_EDIT_REQUEST,
        { textDocument: { uri: document.uri.toString() }, position: { line: cursor.line, character: cursor.character } },
        source.token,
      );
    } catch (err) {
      if (!source.token.isCancellationRequested) {
        this.output.warn(`${NEXT_EDIT_REQUEST} failed: ${err instanceof Error ? err.message : String(err)}`);
      }
      return undefined;
    } finally {
      if (this.request === source) {
        this.request = undefined;
      }
      source.dispose();
    }
    if (source.token.isCancellationRequested || document.version !== version || editor !== vscode.window.activeTextEditor) {
      return undefined;
    }
    if (automatic && this.inlineShownAt(editor)) {
      return undefined; // the server's ghost text came meanwhile
    }
    const answer = parseNextEdit(raw);
    if (!answer) {
      this.output.warn(`Ignoring a malformed ${NEXT_EDIT_REQUEST} answer: ${JSON.stringify(raw)?.slice(0, 500)}`);
      return undefined;
    }
    const proposal = holdProposal(document.uri.toString(), version, answer, reader(document));
    this.output.debug(
      `${NEXT_EDIT_REQUEST}: ${proposal ? `${proposal.edits.length} edit(s)` : 'nothing'}` +
        `${answer.source ? ` from ${answer.source}` : ''}${answer.reason ? ` (${answer.reason})` : ''}`,
    );
    if (proposal) {
      this.proposal = proposal;
      this.render();
    }
    return proposal;
  }

  /** Whether the server's ghost text is shown at the editor's cursor: it has Tab, and a next
   * edit asked for by itself would compete with it. */
  private inlineShownAt(editor: vscode.TextEditor): boolean {
    const shown = this.inlineShown;
    const cursor = editor.selection.active;
    return (
      shown?.uri === editor.document.uri.toString() &&
      shown.version === editor.document.version &&
      shown.line === cursor.line &&
      shown.character === cursor.character
    );
  }

  private shownIn(editor: vscode.TextEditor, proposal: Proposal): boolean {
    return editor.document.uri.toString() === proposal.uri && editor.document.version === proposal.version;
  }

  /** The next edit as an inline item, when it is an insertion at this position. */
  private inlineItem(document: vscode.TextDocument, position: vscode.Position): vscode.InlineCompletionItem | undefined {
    const proposal = this.proposal;
    if (!proposal || proposal.uri !== document.uri.toString() || proposal.version !== document.version) {
      return undefined;
    }
    const fit = inlineAt(proposal.edits[nextIndex(proposal, toPos(position))], toPos(position));
    return fit && new vscode.InlineCompletionItem(fit.insertText, toRange(fit.range));
  }

  private drop(): void {
    if (this.proposal) {
      this.proposal = undefined;
      this.render();
    }
  }

  /** Draws the proposal in the active editor: every edit as a decoration, the hint after the one
   * Tab applies; an insertion at the cursor goes to the inline provider as ghost text instead. */
  private render(): void {
    const editor = vscode.window.activeTextEditor;
    const proposal = this.proposal;
    if (this.decorated && this.decorated !== editor) {
      this.clear(this.decorated);
    }
    if (!editor || !proposal || !this.shownIn(editor, proposal)) {
      if (editor) {
        this.clear(editor);
      }
      this.setVisible(false);
      this.changed.fire(undefined);
      return;
    }
    const cursor = toPos(editor.selection.active);
    const index = nextIndex(proposal, cursor);
    const inline = editor.selection.isEmpty ? inlineAt(proposal.edits[index], cursor) : undefined;
    const drawn = proposal.edits.filter((_, i) => !(inline && i === index));
    editor.setDecorations(
      this.oldText,
      drawn.filter((edit) => edit.oldText !== '').map((edit) => toRange(edit.range)),
    );
    editor.setDecorations(
      this.newText,
      drawn
        .filter((edit) => edit.newText !== '')
        .map((edit) => ({
          range: toRange({ start: edit.range.end, end: edit.range.end }),
          renderOptions: { after: { contentText: shownText(edit.newText) } },
        })),
    );
    const visible = editor.visibleRanges.map((range) => ({ start: toPos(range.start), end: toPos(range.end) }));
    const target = proposal.edits[index];
    const lineEnd = editor.document.lineAt(Math.min(target.range.end.line, editor.document.lineCount - 1)).range.end;
    editor.setDecorations(
      this.hint,
      inline
        ? []
        : [
            {
              range: new vscode.Range(lineEnd, lineEnd),
              renderOptions: { after: { contentText: hintText(jumpFirst(target, visible), proposal.edits.length - 1) } },
            },
          ],
    );
    this.decorated = editor;
    // Ghost text has Tab while it shows; once dismissed, Tab must not apply what is not drawn.
    this.setVisible(!inline);
    this.changed.fire(proposal);
    // Ask the inline provider once per proposal and place: it serves the ghost text from here.
    const place = inline && `${proposal.version}:${cursor.line}:${cursor.character}`;
    if (place && place !== this.inlineAskedAt) {
      this.inlineAskedAt = place;
      void vscode.commands.executeCommand('editor.action.inlineSuggest.trigger');
    }
  }

  private clear(editor: vscode.TextEditor): void {
    for (const type of [this.oldText, this.newText, this.hint]) {
      editor.setDecorations(type, []);
    }
    if (this.decorated === editor) {
      this.decorated = undefined;
    }
  }

  private setVisible(visible: boolean): void {
    if (visible !== this.contextVisible) {
      this.contextVisible = visible;
      void vscode.commands.executeCommand('setContext', VISIBLE_CONTEXT, visible);
    }
  }
}
