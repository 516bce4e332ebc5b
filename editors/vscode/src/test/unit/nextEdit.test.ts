import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  afterApplying,
  comparePos,
  debounceMs,
  endOf,
  hintText,
  holdProposal,
  inlineAt,
  jumpFirst,
  mapPos,
  nextIndex,
  parseNextEdit,
  shownText,
  stillHolds,
  type HeldEdit,
  type Proposal,
  type Span,
  type TextReader,
} from '../../nextEdit';

/** A reader over a plain text, as the view reads a vscode.TextDocument. */
function readerOf(text: string): TextReader {
  const lines = text.split('\n');
  const offset = (line: number, character: number): number | undefined =>
    line < lines.length && character <= lines[line].length
      ? lines.slice(0, line).reduce((sum, l) => sum + l.length + 1, 0) + character
      : undefined;
  return (span) => {
    const start = offset(span.start.line, span.start.character);
    const end = offset(span.end.line, span.end.character);
    return start === undefined || end === undefined ? undefined : text.slice(start, end);
  };
}

/** `text` with `span` replaced, as applying an edit does. */
function applyTo(text: string, span: Span, newText: string): string {
  const lines = text.split('\n');
  const at = (line: number, character: number) => lines.slice(0, line).reduce((sum, l) => sum + l.length + 1, 0) + character;
  return text.slice(0, at(span.start.line, span.start.character)) + newText + text.slice(at(span.end.line, span.end.character));
}

const span = (l1: number, c1: number, l2: number, c2: number): Span => ({
  start: { line: l1, character: c1 },
  end: { line: l2, character: c2 },
});

// A local renamed at its definition (line 1); its uses on lines 2 and 3 come next.
const SOURCE = 'def f(xs):\n    acc = 0\n    for x in xs:\n        total += x\n    return total\n';
const RENAMED = SOURCE.replace('total = 0', 'acc = 0');
const answer = {
  edits: [
    { range: span(4, 11, 4, 16), newText: 'acc' },
    { range: span(3, 8, 3, 13), newText: 'acc' },
  ],
  window: span(0, 0, 5, 0),
  reason: null,
  source: 'rename',
};

describe('parseNextEdit', () => {
  it('takes the documented shape, edits in document order', () => {
    const parsed = parseNextEdit(answer);
    assert.ok(parsed);
    assert.deepEqual(parsed.edits.map((e) => e.range.start.line), [3, 4]);
    assert.equal(parsed.source, 'rename');
    assert.equal(parsed.reason, null);
  });

  it('an empty answer says why; source is optional', () => {
    assert.deepEqual(parseNextEdit({ edits: [], reason: 'no recent edits in this buffer' }), {
      edits: [],
      reason: 'no recent edits in this buffer',
      source: null,
    });
  });

  it('never throws on a malformed answer: no answer, or the malformed edits left out', () => {
    for (const raw of [null, undefined, 3, 'x', [], {}, { edits: 'x' }, { edits: null }]) {
      assert.equal(parseNextEdit(raw), undefined, JSON.stringify(raw));
    }
    const bad = [
      null,
      { newText: 'a' },
      { range: span(1, 0, 1, 2) },
      { range: span(1, 0, 1, 2), newText: 3 },
      { range: span(2, 0, 1, 0), newText: 'reversed' },
      { range: { start: { line: -1, character: 0 }, end: { line: 1, character: 0 } }, newText: 'negative' },
      { range: { start: { line: 1.5, character: 0 }, end: { line: 2, character: 0 } }, newText: 'fraction' },
      { range: { start: { line: 1 }, end: { line: 2, character: 0 } }, newText: 'no character' },
    ];
    const parsed = parseNextEdit({ edits: [...bad, answer.edits[0]], reason: 7, source: {} });
    assert.deepEqual(parsed, { edits: [answer.edits[0]], reason: null, source: null });
  });

  it('leaves out an edit that overlaps an earlier one', () => {
    const parsed = parseNextEdit({ edits: [{ range: span(1, 0, 1, 6), newText: 'a' }, { range: span(1, 4, 1, 8), newText: 'b' }] });
    assert.deepEqual(parsed?.edits.map((e) => e.newText), ['a']);
  });
});

describe('holdProposal and stillHolds', () => {
  const parsed = parseNextEdit(answer)!;

  it('reads the old text of each edit from the document the answer is for', () => {
    const proposal = holdProposal('file:///a.py', 7, parsed, readerOf(RENAMED));
    assert.ok(proposal);
    assert.deepEqual(proposal.edits.map((e) => e.oldText), ['total', 'total']);
    assert.equal(proposal.version, 7);
  });

  it('leaves out edits outside the document or that change nothing; none left: no proposal', () => {
    const outside = { range: span(40, 0, 40, 1), newText: 'x' };
    const same = { range: span(1, 4, 1, 7), newText: 'acc' };
    assert.equal(holdProposal('file:///a.py', 1, { edits: [outside, same], reason: null, source: null }, readerOf(RENAMED)), undefined);
  });

  it('holds while the ranges keep their old text, not after they change', () => {
    const proposal = holdProposal('file:///a.py', 7, parsed, readerOf(RENAMED))!;
    assert.equal(stillHolds(proposal, readerOf(RENAMED)), true);
    assert.equal(stillHolds(proposal, readerOf(RENAMED.replace('total += x', 'totl += x'))), false);
    assert.equal(stillHolds(proposal, readerOf('def f():\n')), false, 'the document got shorter');
  });
});

describe('range mapping', () => {
  it('endOf: the position after inserted text, over line breaks', () => {
    assert.deepEqual(endOf({ line: 2, character: 4 }, 'abc'), { line: 2, character: 7 });
    assert.deepEqual(endOf({ line: 2, character: 4 }, 'ab\ncd'), { line: 3, character: 2 });
    assert.deepEqual(endOf({ line: 2, character: 4 }, ''), { line: 2, character: 4 });
  });

  it('mapPos: before stays, inside is lost, after moves by the change', () => {
    const replaced = span(1, 4, 1, 9); // 5 characters become 3
    assert.deepEqual(mapPos({ line: 1, character: 2 }, replaced, 'acc'), { line: 1, character: 2 });
    assert.deepEqual(mapPos({ line: 1, character: 4 }, replaced, 'acc'), { line: 1, character: 4 });
    assert.equal(mapPos({ line: 1, character: 6 }, replaced, 'acc'), undefined);
    assert.deepEqual(mapPos({ line: 1, character: 12 }, replaced, 'acc'), { line: 1, character: 10 });
    assert.deepEqual(mapPos({ line: 3, character: 12 }, replaced, 'acc'), { line: 3, character: 12 });
    assert.deepEqual(mapPos({ line: 3, character: 1 }, replaced, 'a\nb\n'), { line: 5, character: 1 });
    assert.deepEqual(mapPos({ line: 1, character: 10 }, replaced, 'a\nbc'), { line: 2, character: 3 });
  });

  it('afterApplying: the other edits still point at their old text in the edited document', () => {
    const edits: HeldEdit[] = [
      { range: span(2, 8, 2, 13), newText: 'acc', oldText: 'total' },
      { range: span(3, 2, 3, 7), newText: 'acc', oldText: 'total' },
      { range: span(3, 10, 3, 15), newText: 'acc', oldText: 'total' },
    ];
    const text = 'x\ny\n        total\n  total + total\n';
    const proposal: Proposal = { uri: 'file:///a.py', version: 1, edits };
    for (let index = 0; index < edits.length; index += 1) {
      const after = applyTo(text, edits[index].range, edits[index].newText);
      const rest = afterApplying(proposal, index, 2);
      assert.ok(rest);
      assert.equal(rest.version, 2);
      assert.equal(rest.edits.length, 2);
      assert.equal(stillHolds(rest, readerOf(after)), true, `after applying edit ${index}`);
    }
    const multiLine = { ...edits[0], newText: 'acc,\n        other' };
    const rest = afterApplying({ ...proposal, edits: [multiLine, edits[1]] }, 0, 2)!;
    assert.equal(stillHolds(rest, readerOf(applyTo(text, multiLine.range, multiLine.newText))), true);
    assert.equal(afterApplying({ ...proposal, edits: [edits[0]] }, 0, 2), undefined, 'nothing left');
  });
});

describe('which edit, and how it is shown', () => {
  const edits: HeldEdit[] = [
    { range: span(3, 8, 3, 13), newText: 'acc', oldText: 'total' },
    { range: span(4, 11, 4, 16), newText: 'acc', oldText: 'total' },
  ];
  const proposal: Proposal = { uri: 'file:///a.py', version: 1, edits };

  it('nextIndex: the first edit at or after the cursor, else the first', () => {
    assert.equal(nextIndex(proposal, { line: 1, character: 0 }), 0);
    assert.equal(nextIndex(proposal, { line: 3, character: 13 }), 0);
    assert.equal(nextIndex(proposal, { line: 3, character: 14 }), 1);
    assert.equal(nextIndex(proposal, { line: 9, character: 0 }), 0);
  });

  it('inlineAt: an insertion around the cursor on its line is ghost text', () => {
    // `print(x` + `)`: the edit adds `, end=""` before the closing parenthesis.
    const insertion: HeldEdit = { range: span(2, 4, 2, 12), oldText: 'print(x)', newText: 'print(x, end="")' };
    assert.deepEqual(inlineAt(insertion, { line: 2, character: 11 }), { range: insertion.range, insertText: insertion.newText });
    const atCursor: HeldEdit = { range: span(2, 4, 2, 4), oldText: '', newText: 'return x' };
    assert.deepEqual(inlineAt(atCursor, { line: 2, character: 4 }), { range: atCursor.range, insertText: 'return x' });
  });

  it('inlineAt: a replacement, another line, a line break or a cursor outside the range is not', () => {
    assert.equal(inlineAt(edits[0], { line: 3, character: 13 }), undefined, 'replaces text');
    assert.equal(inlineAt(edits[0], { line: 2, character: 8 }), undefined, 'another line');
    const insertion: HeldEdit = { range: span(2, 4, 2, 4), oldText: '', newText: 'x\ny' };
    assert.equal(inlineAt(insertion, { line: 2, character: 4 }), undefined, 'a line break');
    const later: HeldEdit = { range: span(2, 8, 2, 8), oldText: '', newText: 'x' };
    assert.equal(inlineAt(later, { line: 2, character: 4 }), undefined, 'after the cursor');
    const shrink: HeldEdit = { range: span(2, 4, 2, 8), oldText: 'abcd', newText: 'abd' };
    assert.equal(inlineAt(shrink, { line: 2, character: 6 }), undefined, 'deletes text');
  });

  it('shownText: one line, line breaks as ⏎, long text cut', () => {
    assert.equal(shownText('acc'), 'acc');
    assert.equal(shownText('a\nb'), 'a ⏎ b');
    assert.equal(shownText('x'.repeat(100), 10), `${'x'.repeat(9)}…`);
  });

  it('hintText: the key, what it does there, how many more', () => {
    assert.equal(hintText(false, 0), '  Tab to apply, Esc to dismiss');
    assert.equal(hintText(true, 2), '  Tab to jump here (2 more), Esc to dismiss');
  });

  it('jumpFirst: only when the edit is not on screen', () => {
    assert.equal(jumpFirst(edits[0], [span(0, 0, 40, 0)]), false);
    assert.equal(jumpFirst(edits[0], [span(10, 0, 50, 0)]), true);
    assert.equal(jumpFirst(edits[0], [span(0, 0, 1, 0), span(3, 0, 9, 0)]), false, 'folded: two visible ranges');
    assert.equal(jumpFirst(edits[0], []), true);
  });

  it('debounceMs: the setting, or the default for a bad value', () => {
    assert.equal(debounceMs(250), 250);
    assert.equal(debounceMs(0), 0);
    for (const bad of [undefined, null, -1, Number.NaN, '300']) {
      assert.equal(debounceMs(bad), 500, String(bad));
    }
    assert.equal(debounceMs(1e9), 60_000);
  });

  it('comparePos orders by line, then column', () => {
    assert.ok(comparePos({ line: 1, character: 9 }, { line: 2, character: 0 }) < 0);
    assert.ok(comparePos({ line: 2, character: 3 }, { line: 2, character: 1 }) > 0);
    assert.equal(comparePos({ line: 2, character: 3 }, { line: 2, character: 3 }), 0);
  });
});
