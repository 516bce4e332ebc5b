import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buildServerSettings, expandPath, needsRestart, SERVER_SETTINGS } from '../../settings';

const DEFAULTS = {
  enable: true,
  languages: {},
  model: {
    path: 'auto',
    device: 'auto',
    dtype: 'auto',
    quantization: 'auto',
    fimFormat: 'auto',
    backend: 'local',
    url: null,
    name: null,
    apiKeyEnv: null,
    timeoutMs: 5000,
    allowPickle: false,
  },
  completion: {
    maxNewTokens: 64,
    multiline: 'auto',
    midWord: 'complete',
    debounceMs: 0,
    speculative: true,
    typeThrough: true,
    precomputeNext: true,
    firstResponseMs: 300,
    maxWaitMs: 10000,
    alternatives: 3,
    lineStartReading: 'above',
  },
  context: {
    budgetTokens: 1024,
    crossFile: true,
    crossFileShare: 35,
    similarSnippets: 4,
    crossFileGate: true,
  },
  compression: { kvCompression: 'off', kvRatio: 4, minPromptTokens: 2048 },
  nextEdit: { promptFormat: 'auto', prewarm: true },
};

describe('buildServerSettings', () => {
  it('gives the full defaulted tree when nothing is set', () => {
    assert.deepEqual(buildServerSettings(() => undefined), DEFAULTS);
  });

  it('maps dotted VS Code settings into the nested camelCase tree', () => {
    const user: Record<string, unknown> = {
      enable: false,
      languages: { markdown: false },
      'model.path': '/models/qwen',
      'model.device': 'cpu',
      'completion.maxNewTokens': 16,
      'completion.multiline': 'never',
      'context.budgetTokens': 256,
      serverPath: '/should/not/appear',
    };
    const tree = buildServerSettings((key) => user[key]);
    assert.equal(tree.enable, false);
    assert.deepEqual(tree.languages, { markdown: false });
    assert.deepEqual(tree.model, { ...DEFAULTS.model, path: '/models/qwen', device: 'cpu' });
    assert.equal((tree.completion as Record<string, unknown>).maxNewTokens, 16);
    assert.equal((tree.completion as Record<string, unknown>).multiline, 'never');
    assert.equal((tree.context as Record<string, unknown>).budgetTokens, 256);
    assert.equal('serverPath' in tree, false);
  });

  it('sends an empty model path as null and expands ~ and ${workspaceFolder}', () => {
    assert.equal((buildServerSettings((k) => (k === 'model.path' ? '  ' : undefined)).model as { path: unknown }).path, null);
    const vars = { workspaceFolder: '/ws', userHome: '/home/u' };
    const tree = buildServerSettings((k) => (k === 'model.path' ? '${workspaceFolder}/models/tiny' : undefined), vars);
    assert.equal((tree.model as { path: unknown }).path, '/ws/models/tiny');
    assert.equal(expandPath('~/m', vars), '/home/u/m');
    assert.equal(expandPath('${userHome}/m', vars), '/home/u/m');
    assert.equal(expandPath('a~/m', vars), 'a~/m');
  });

  it('copies values, so the tree cannot alias VS Code configuration objects', () => {
    const languages = { python: true };
    const tree = buildServerSettings((k) => (k === 'languages' ? languages : undefined));
    (tree.languages as Record<string, boolean>).python = false;
    assert.equal(languages.python, true);
  });

  it('passes invalid values through for the server to report', () => {
    const tree = buildServerSettings((k) => (k === 'completion.maxNewTokens' ? 'lots' : undefined));
    assert.equal((tree.completion as Record<string, unknown>).maxNewTokens, 'lots');
  });

  it('lists every key once', () => {
    const keys = SERVER_SETTINGS.map((s) => s.key);
    assert.equal(new Set(keys).size, keys.length);
  });
});

describe('needsRestart', () => {
  it('restarts for how the server starts, not for server settings', () => {
    assert.equal(needsRestart((k) => k === 'serverPath'), true);
    assert.equal(needsRestart((k) => k === 'pythonPath'), true);
    assert.equal(needsRestart((k) => k === 'serverArgs'), true);
    assert.equal(needsRestart((k) => k === 'model.path' || k === 'enable'), false);
  });
});
