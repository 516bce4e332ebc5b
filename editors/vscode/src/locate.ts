// Where the language server comes from, tried in a fixed, logged order:
//   1. the `memosight.serverPath` setting,
//   2. the selected Python interpreter (`python -m memosight_lsp`, or the console script next to it),
//   3. `memosight-lsp` on PATH.
// No `vscode` import: probes are injected so the order is unit-testable.

import * as path from 'node:path';

export const SERVER_MODULE = 'memosight_lsp';
export const SERVER_SCRIPT = 'memosight-lsp';

export type ServerSource = 'setting' | 'interpreter' | 'interpreter-script' | 'path';

export interface ServerCommand {
  command: string;
  args: string[];
  source: ServerSource;
}

export interface LocateInputs {
  /** `memosight.serverPath`; empty means unset. */
  serverPath?: string;
  /** Extra arguments for the server (`memosight.serverArgs`). */
  serverArgs?: string[];
  /** The interpreter's command line (e.g. ['/venv/bin/python']), if one is known. */
  interpreter?: string[];
  /** Where the interpreter came from, for the log ("ms-python", "memosight.pythonPath"). */
  interpreterSource?: string;
}

export interface LocateProbes {
  /** True when `file` exists and can be executed. */
  isExecutable(file: string): Promise<boolean>;
  /** True when `interpreter` can import `module` (without starting the server). */
  hasModule(interpreter: string[], module: string): Promise<boolean>;
  /** The full path of `name` on PATH, if any. */
  which(name: string): Promise<string | undefined>;
}

/** The console script that pip installs next to `python` (bin/ on POSIX, Scripts\ on Windows). */
export function scriptNextTo(python: string, platform: NodeJS.Platform = process.platform): string {
  const mod = platform === 'win32' ? path.win32 : path.posix;
  const name = platform === 'win32' ? `${SERVER_SCRIPT}.exe` : SERVER_SCRIPT;
  return mod.join(mod.dirname(python), name);
}

/** The first server found, in the documented order; every step is logged. */
export async function locateServer(
  inputs: LocateInputs,
  probes: LocateProbes,
  log: (line: string) => void,
): Promise<ServerCommand | undefined> {
  const extra = inputs.serverArgs ?? [];

  const serverPath = inputs.serverPath?.trim();
  if (serverPath) {
    if (await probes.isExecutable(serverPath)) {
      log(`1. memosight.serverPath: using ${serverPath}`);
      return { command: serverPath, args: extra, source: 'setting' };
    }
    log(`1. memosight.serverPath: ${serverPath} is not an executable file; trying the next way`);
  } else {
    log('1. memosight.serverPath: not set');
  }

  const interpreter = inputs.interpreter?.filter((part) => part !== '');
  if (interpreter && interpreter.length > 0) {
    const shown = interpreter.join(' ');
    const from = inputs.interpreterSource ?? 'interpreter';
    if (await probes.hasModule(interpreter, SERVER_MODULE)) {
      log(`2. Python interpreter (${from}): ${shown} has ${SERVER_MODULE}; using -m ${SERVER_MODULE}`);
      return {
        command: interpreter[0],
        args: [...interpreter.slice(1), '-m', SERVER_MODULE, ...extra],
        source: 'interpreter',
      };
    }
    const script = scriptNextTo(interpreter[0]);
    if (interpreter.length === 1 && (await probes.isExecutable(script))) {
      log(`2. Python interpreter (${from}): using the console script ${script}`);
      return { command: script, args: extra, source: 'interpreter-script' };
    }
    log(`2. Python interpreter (${from}): ${shown} cannot import ${SERVER_MODULE}`);
  } else {
    log('2. Python interpreter: none selected (install the Python extension or set memosight.pythonPath)');
  }

  const onPath = await probes.which(SERVER_SCRIPT);
  if (onPath) {
    log(`3. PATH: using ${onPath}`);
    return { command: onPath, args: extra, source: 'path' };
  }
  log(`3. PATH: no ${SERVER_SCRIPT} found`);
  return undefined;
}

/** What the "server not found" notification says. */
export function notFoundMessage(interpreter?: string[]): string {
  const python = interpreter && interpreter.length > 0 ? interpreter.join(' ') : 'python';
  return (
    'MemoSight: language server not found. Install it into your Python environment with ' +
    `\`${python} -m pip install memosight-lsp\` (or \`pip install -e .\` in a checkout of the repository), ` +
    'or set `memosight.serverPath` to the `memosight-lsp` executable.'
  );
}
