// The server's settings tree, read from VS Code's `memosight.*` settings.
// No `vscode` import: the extension passes a reader, unit tests pass a plain object.

/** One server setting: its dotted key under `memosight.` and its default. */
export interface ServerSettingSpec {
  key: string;
  default: unknown;
}

/**
 * Every setting the server understands, in the order of memosight_lsp/config.py.
 * package.json documents each of these (a unit test keeps both, and the server defaults, in step).
 */
export const SERVER_SETTINGS: readonly ServerSettingSpec[] = [
  { key: 'enable', default: true },
  { key: 'languages', default: {} },
  { key: 'model.path', default: 'auto' },
  { key: 'model.device', default: 'auto' },
  { key: 'model.dtype', default: 'auto' },
  { key: 'model.quantization', default: 'auto' },
  { key: 'model.fimFormat', default: 'auto' },
  { key: 'model.backend', default: 'local' },
  { key: 'model.url', default: null },
  { key: 'model.name', default: null },
  { key: 'model.apiKeyEnv', default: null },
  { key: 'model.timeoutMs', default: 5000 },
  { key: 'model.allowPickle', default: false },
  { key: 'completion.maxNewTokens', default: 64 },
  { key: 'completion.multiline', default: 'auto' },
  { key: 'completion.midWord', default: 'complete' },
  { key: 'completion.debounceMs', default: 0 },
  { key: 'completion.speculative', default: true },
  { key: 'completion.typeThrough', default: true },
  { key: 'completion.precomputeNext', default: true },
  { key: 'completion.firstResponseMs', default: 300 },
  { key: 'completion.maxWaitMs', default: 10000 },
  { key: 'completion.alternatives', default: 3 },
  { key: 'completion.lineStartReading', default: 'above' },
  { key: 'context.budgetTokens', default: 1024 },
  { key: 'context.crossFile', default: true },
  { key: 'context.crossFileShare', default: 35 },
  { key: 'context.similarSnippets', default: 4 },
  { key: 'context.crossFileGate', default: true },
  { key: 'compression.kvCompression', default: 'off' },
  { key: 'compression.kvRatio', default: 4 },
  { key: 'compression.minPromptTokens', default: 2048 },
  { key: 'nextEdit.promptFormat', default: 'auto' },
  { key: 'nextEdit.prewarm', default: true },
];

/** Server settings a workspace must not set (application scope in package.json): read from the
 * user's settings only, as the server honours them from initializationOptions only. */
export const USER_ONLY_SETTINGS: readonly string[] = ['model.allowPickle'];

/** Settings only the extension reads (how to start the server, next edits in the editor); never
 * sent to the server. */
export const CLIENT_SETTINGS: readonly string[] = [
  'serverPath',
  'serverArgs',
  'pythonPath',
  'trace.server',
  'nextEdit.enabled',
  'nextEdit.debounceMs',
];

export type JsonObject = { [key: string]: unknown };

/** Reads one `memosight.<key>` setting; undefined when unset. */
export type SettingReader = (key: string) => unknown;

/** Values that expand `${workspaceFolder}`, `${userHome}` and a leading `~` in paths. */
export interface PathVariables {
  workspaceFolder?: string;
  userHome?: string;
}

export function expandPath(value: string, vars: PathVariables): string {
  let out = value;
  if (vars.userHome) {
    out = out.replace(/\$\{userHome\}/g, vars.userHome);
    if (out === '~' || out.startsWith('~/')) {
      out = vars.userHome + out.slice(1);
    }
  }
  if (vars.workspaceFolder) {
    out = out.replace(/\$\{workspaceFolder\}/g, vars.workspaceFolder);
  }
  return out;
}

function setPath(target: JsonObject, dotted: string, value: unknown): void {
  const parts = dotted.split('.');
  let node = target;
  for (const part of parts.slice(0, -1)) {
    const next = node[part];
    if (typeof next !== 'object' || next === null) {
      node[part] = {};
    }
    node = node[part] as JsonObject;
  }
  node[parts[parts.length - 1]] = value;
}

/**
 * The camelCase settings tree the server expects (initializationOptions,
 * workspace/configuration and didChangeConfiguration all carry this), with defaults filled in.
 * Values are passed through unvalidated: the server validates and reports problems itself.
 */
export function buildServerSettings(read: SettingReader, vars: PathVariables = {}): JsonObject {
  const tree: JsonObject = {};
  for (const spec of SERVER_SETTINGS) {
    let value = read(spec.key);
    if (value === undefined) {
      value = spec.default;
    }
    if (spec.key === 'model.path') {
      value = typeof value === 'string' && value.trim() !== '' ? expandPath(value.trim(), vars) : null;
    }
    // A JSON copy: VS Code hands out read-only proxies, and the tree must not alias them.
    setPath(tree, spec.key, value === null ? null : JSON.parse(JSON.stringify(value)));
  }
  return tree;
}

/** The dotted keys a settings change touched (for deciding between notify and restart). */
export function needsRestart(affects: (key: string) => boolean): boolean {
  return ['serverPath', 'serverArgs', 'pythonPath'].some((key) => affects(key));
}
