import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseUpdate, stillThere, type EditorState } from '../../refresh';

const update = { textDocument: { uri: 'file:///a.py', version: 3 }, position: { line: 4, character: 8 }, text: 'x = 1' };
const here: EditorState = { uri: 'file:///a.py', version: 3, line: 4, character: 8, empty: true };

describe('parseUpdate', () => {
  it('accepts the documented shape', () => {
    assert.deepEqual(parseUpdate(update), { uri: 'file:///a.py', version: 3, line: 4, character: 8 });
  });

  it('rejects what has no document or position, and tolerates a missing version', () => {
    assert.equal(parseUpdate(null), undefined);
    assert.equal(parseUpdate({ position: { line: 1, character: 0 } }), undefined);
    assert.equal(parseUpdate({ textDocument: { uri: 'file:///a.py' }, position: { line: -1, character: 0 } }), undefined);
    assert.equal(parseUpdate({ textDocument: { uri: 'file:///a.py' }, position: { line: 1.5, character: 0 } }), undefined);
    assert.equal(parseUpdate({ textDocument: { uri: 'file:///a.py' }, position: { line: 1, character: 0 } })?.version, null);
  });
});

describe('stillThere', () => {
  const parsed = parseUpdate(update)!;

  it('asks again where nothing changed', () => {
    assert.equal(stillThere(parsed, here), true);
  });

  it('not after typing, moving, selecting or switching files', () => {
    assert.equal(stillThere(parsed, { ...here, version: 4 }), false);
    assert.equal(stillThere(parsed, { ...here, character: 9 }), false);
    assert.equal(stillThere(parsed, { ...here, line: 5 }), false);
    assert.equal(stillThere(parsed, { ...here, empty: false }), false);
    assert.equal(stillThere(parsed, { ...here, uri: 'file:///b.py' }), false);
    assert.equal(stillThere(parsed, undefined), false);
  });
});
