// The real probes behind locateServer: the file system, a Python subprocess and PATH.
// No `vscode` import, so unit tests run them against real files and processes.

import { execFile } from 'node:child_process';
import { constants as fsConstants, promises as fs } from 'node:fs';
import * as path from 'node:path';
import type { LocateProbes } from './locate';

const PROBE_TIMEOUT_MS = 15_000;

export async function isExecutable(file: string): Promise<boolean> {
  try {
    const stat = await fs.stat(file);
    if (!stat.isFile()) {
      return false;
    }
    await fs.access(file, process.platform === 'win32' ? fsConstants.F_OK : fsConstants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** Asks the interpreter whether it can find the module; does not import it (no torch load). */
export function hasModule(interpreter: string[], module: string): Promise<boolean> {
  const code = `import importlib.util, sys; sys.exit(0 if importlib.util.find_spec(${JSON.stringify(module)}) else 1)`;
  return new Promise((resolve) => {
    execFile(
      interpreter[0],
      [...interpreter.slice(1), '-c', code],
      // PYTHONSAFEPATH: a module in the folder the probe runs in must not count.
      { timeout: PROBE_TIMEOUT_MS, windowsHide: true, env: { ...process.env, PYTHONSAFEPATH: '1' } },
      (error) => resolve(error === null),
    );
  });
}

export async function which(
  name: string,
  envPath: string = process.env.PATH ?? '',
  platform: NodeJS.Platform = process.platform,
): Promise<string | undefined> {
  const exts = platform === 'win32' ? (process.env.PATHEXT ?? '.EXE;.CMD;.BAT').split(';') : [''];
  for (const dir of envPath.split(path.delimiter)) {
    if (!dir) {
      continue;
    }
    for (const ext of exts) {
      const candidate = path.join(dir, name + ext.toLowerCase());
      if (await isExecutable(candidate)) {
        return candidate;
      }
    }
  }
  return undefined;
}

export const nodeProbes: LocateProbes = { isExecutable, hasModule, which: (name) => which(name) };
