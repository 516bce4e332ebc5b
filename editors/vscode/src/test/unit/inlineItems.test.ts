// Alternatives (`completion.alternatives`): every item of the server's inline answer reaches VS
// Code, which cycles them with Alt+] / Alt+[. Checked at both steps between the server and VS
// Code: vscode-languageclient's conversion, and the extension's middleware (withExtraItem).
import assert from 'node:assert/strict';
import Module from 'node:module';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { withExtraItem } from '../../inlineItems';

/** Just enough of the `vscode` module for vscode-languageclient's protocol converter: the
 * classes an inline answer becomes, and an empty class for everything else it extends. */
class Range {
  constructor(
    readonly startLine: number,
    readonly startCharacter: number,
    readonly endLine: number,
    readonly endCharacter: number,
  ) {}
}
class InlineCompletionItem {
  constructor(
    readonly insertText: unknown,
    readonly range?: Range,
    readonly command?: unknown,
  ) {}
  filterText?: string;
}
class InlineCompletionList {
  constructor(readonly items: InlineCompletionItem[]) {}
}
class SnippetString {
  constructor(readonly value: string) {}
}
const vscodeStub = new Proxy({ Range, InlineCompletionItem, InlineCompletionList, SnippetString } as Record<string, unknown>, {
  get: (target, key: string) => target[key] ?? class {},
});

/** vscode-languageclient's protocol converter, loaded with the stub as `vscode`. */
function protocolConverter(): { asInlineCompletionResult(value: unknown, token?: unknown): Promise<unknown> } {
  const loader = Module as unknown as { _load(request: string, parent: unknown, isMain: boolean): unknown };
  const original = loader._load;
  loader._load = function (request, parent, isMain) {
    return request === 'vscode' ? vscodeStub : original.call(this, request, parent, isMain);
  };
  try {
    // Not an exported subpath of the package: loaded by its file, beside the package's main
    // module (lib/common/api.js).
    const main = require.resolve('vscode-languageclient');
    const converter = require(path.join(path.dirname(main), 'protocolConverter.js')) as {
      createConverter(uri: undefined, trustMarkdown: boolean, supportHtml: boolean): ReturnType<typeof protocolConverter>;
    };
    return converter.createConverter(undefined, false, false);
  } finally {
    loader._load = original;
  }
}

const serverItems = [
  { insertText: 'total += x', range: { start: { line: 3, character: 8 }, end: { line: 3, character: 8 } } },
  { insertText: 'total -= x', range: { start: { line: 3, character: 8 }, end: { line: 3, character: 8 } } },
  { insertText: 'return total', range: { start: { line: 3, character: 8 }, end: { line: 3, character: 8 } } },
];

describe('inline completion alternatives', () => {
  it('vscode-languageclient converts every item of the server\'s list, in order', async () => {
    const converted = (await protocolConverter().asInlineCompletionResult({ items: serverItems })) as InlineCompletionList;
    assert.ok(converted instanceof InlineCompletionList);
    assert.deepEqual(converted.items.map((item) => item.insertText), serverItems.map((item) => item.insertText));
    const fromArray = (await protocolConverter().asInlineCompletionResult(serverItems)) as InlineCompletionItem[];
    assert.equal(fromArray.length, 3);
  });

  it('the middleware passes every item through when there is no next edit', () => {
    const list = { items: ['a', 'b', 'c'] };
    assert.equal(withExtraItem<string, typeof list>(list, undefined), list);
    assert.deepEqual(withExtraItem<string, string[]>(['a', 'b', 'c'], undefined), ['a', 'b', 'c']);
    assert.equal(withExtraItem<string, null>(null, undefined), null);
  });

  it('a next edit goes in front of all the server\'s items, none dropped', () => {
    assert.deepEqual(withExtraItem({ items: ['a', 'b', 'c'] }, 'next'), { items: ['next', 'a', 'b', 'c'] });
    assert.deepEqual(withExtraItem(['a', 'b', 'c'], 'next'), ['next', 'a', 'b', 'c']);
    assert.deepEqual(withExtraItem(undefined, 'next'), ['next']);
    assert.deepEqual(withExtraItem<string, null>(null, 'next'), ['next']);
  });
});
