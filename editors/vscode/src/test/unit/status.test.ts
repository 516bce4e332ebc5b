import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { fixCommand, formatClientState, formatLatency, formatStatus, parseStatus } from '../../status';

const NO_NOTICE = { notice: null, fix: null };

describe('parseStatus', () => {
  it('accepts the documented shape', () => {
    assert.deepEqual(parseStatus({ state: 'ready', message: 'ok', model: 'tiny', lastLatencyMs: 12.5 }), {
      state: 'ready',
      message: 'ok',
      model: 'tiny',
      lastLatencyMs: 12.5,
      ...NO_NOTICE,
    });
    const fallback = { notice: 'embedded fallback: no code model found', fix: 'run `hf download a b`' };
    assert.deepEqual(parseStatus({ state: 'ready', model: 'memosight-default', ...fallback })?.notice, fallback.notice);
    assert.deepEqual(parseStatus({ state: 'ready', notice: 7, fix: '' })?.notice, null);
  });

  it('rejects unknown states and non-objects, and tolerates missing fields', () => {
    assert.equal(parseStatus({ state: 'sleeping' }), undefined);
    assert.equal(parseStatus(null), undefined);
    assert.equal(parseStatus('ready'), undefined);
    assert.deepEqual(parseStatus({ state: 'loading' }), { state: 'loading', message: '', model: null, lastLatencyMs: null, ...NO_NOTICE });
    assert.equal(parseStatus({ state: 'ready', lastLatencyMs: Number.NaN })?.lastLatencyMs, null);
  });
});

describe('formatStatus', () => {
  it('shows the last latency when ready', () => {
    const view = formatStatus({ state: 'ready', message: '', model: 'tiny', lastLatencyMs: 41.7, ...NO_NOTICE });
    assert.equal(view.text, '$(sparkle) MemoSight 42 ms');
    assert.equal(view.severity, 'none');
    assert.match(view.tooltip, /Model: tiny/);
    assert.match(view.tooltip, /Last completion: 42 ms/);
  });

  it('keeps an earlier latency when the notification has none', () => {
    const view = formatStatus({ state: 'ready', message: '', model: null, lastLatencyMs: null, ...NO_NOTICE }, 7.25);
    assert.equal(view.text, '$(sparkle) MemoSight 7.3 ms');
    assert.equal(formatStatus({ state: 'ready', message: '', model: null, lastLatencyMs: null, ...NO_NOTICE }).text, '$(sparkle) MemoSight');
  });

  it('distinguishes loading, disabled and error', () => {
    const loading = formatStatus({ state: 'loading', message: 'loading /m', model: null, lastLatencyMs: null, ...NO_NOTICE });
    assert.match(loading.text, /loading~spin/);
    assert.match(loading.tooltip, /loading model\nloading \/m/);
    const disabled = formatStatus({ state: 'disabled', message: 'disabled by settings', model: 'm', lastLatencyMs: 3, ...NO_NOTICE });
    assert.equal(disabled.severity, 'warning');
    assert.match(disabled.text, /circle-slash/);
    const error = formatStatus({ state: 'error', message: 'model.path: no config.json', model: null, lastLatencyMs: null, ...NO_NOTICE });
    assert.equal(error.severity, 'error');
    assert.match(error.tooltip, /no config\.json/);
  });

  it('says when the embedded fallback serves, with the fix, in the warning colour', () => {
    const status = {
      state: 'ready' as const,
      message: 'memosight-default ready',
      model: 'memosight-default',
      lastLatencyMs: null,
      notice: 'embedded fallback: no code model found',
      fix: 'run `hf download Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF q.gguf` (or set model.path)',
    };
    const view = formatStatus(status);
    assert.equal(view.severity, 'warning');
    assert.match(view.tooltip, /embedded fallback: no code model found\nFix: run `hf download/);
    assert.equal(fixCommand(status.fix), 'hf download Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF q.gguf');
    assert.equal(fixCommand('set model.path to another model'), undefined);
    assert.equal(fixCommand(null), undefined);
    assert.equal(formatStatus({ ...status, ...NO_NOTICE }).severity, 'none');
  });

  it('formats client-side states', () => {
    assert.equal(formatClientState('notFound', 'pip install').severity, 'warning');
    assert.match(formatClientState('notFound', 'pip install').tooltip, /not found\npip install/);
    assert.match(formatClientState('stopped').text, /debug-stop/);
  });
});

describe('formatLatency', () => {
  it('picks a precision by size', () => {
    assert.equal(formatLatency(0.42), '0.4 ms');
    assert.equal(formatLatency(123.4), '123 ms');
    assert.equal(formatLatency(12_345), '12.3 s');
  });
});
