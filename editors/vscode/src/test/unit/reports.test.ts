import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatContext, formatStats } from '../../reports';

describe('formatContext', () => {
  const snippet = {
    uri: 'file:///ws/util.py',
    range: { start: { line: 9, character: 0 }, end: { line: 19, character: 0 } },
    symbol: 'parse',
    kind: 'function',
    tokens: 40,
  };

  it('lists the snippets and shows the prompt verbatim, even with backticks in it', () => {
    const prompt = '<|fim_prefix|>x = "```"\n';
    const text = formatContext({ promptTokens: 120, snippets: [snippet], prompt, reason: null }, 'file:///ws/a.py', {
      line: 2,
      character: 4,
    });
    assert.match(text, /Position: line 3, column 5/);
    assert.match(text, /Prompt tokens: 120/);
    assert.match(text, /- function parse — file:\/\/\/ws\/util\.py:10-20 \(40 tokens\)/);
    assert.ok(text.includes(`\`\`\`\`\n${prompt}\n\`\`\`\``), 'prompt fenced with four backticks');
    assert.doesNotMatch(text, /No completion here/);
  });

  it('says why there would be no completion', () => {
    const text = formatContext({ promptTokens: 0, snippets: [], prompt: '', reason: 'language markdown is disabled' }, 'u', {
      line: 0,
      character: 0,
    });
    assert.match(text, /\*\*No completion here:\*\* language markdown is disabled/);
    assert.match(text, /## Snippets \(0\)\n\n\(none\)/);
  });
});

describe('formatStats', () => {
  it('puts known metrics first with labels and keeps unknown ones', () => {
    const text = formatStats({ cacheHits: 3, p95Ms: 20.456, requests: 10, meanTokens: null });
    const lines = text.split('\n');
    assert.deepEqual(lines.slice(4, 8), [
      '| Requests | 10 |',
      '| Latency p95 (ms) | 20.46 |',
      '| Mean tokens per completion | — |',
      '| cacheHits | 3 |',
    ]);
  });
});
