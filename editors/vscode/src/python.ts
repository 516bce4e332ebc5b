// The Python interpreter to look for the server in: `memosight.pythonPath` when set, else the
// interpreter selected in the Python extension (ms-python.python), if that is installed.

import * as vscode from 'vscode';

/** The small part of the Python extension's API used here (both the new and the legacy shape). */
interface PythonExtensionApi {
  environments?: {
    getActiveEnvironmentPath(resource?: vscode.Uri): { path: string } | undefined;
    resolveEnvironment(env: { path: string } | string): Promise<{ executable?: { uri?: vscode.Uri } } | undefined>;
    onDidChangeActiveEnvironmentPath?: vscode.Event<unknown>;
  };
  settings?: {
    getExecutionDetails?(resource?: vscode.Uri): { execCommand?: string[] };
  };
}

export interface Interpreter {
  command: string[];
  source: string;
}

async function pythonApi(): Promise<PythonExtensionApi | undefined> {
  const ext = vscode.extensions.getExtension<PythonExtensionApi>('ms-python.python');
  if (!ext) {
    return undefined;
  }
  return ext.isActive ? ext.exports : await ext.activate();
}

export async function selectedInterpreter(
  resource: vscode.Uri | undefined,
  log: (line: string) => void,
): Promise<Interpreter | undefined> {
  const configured = vscode.workspace.getConfiguration('memosight', resource).get<string>('pythonPath')?.trim();
  if (configured) {
    return { command: [configured], source: 'memosight.pythonPath' };
  }
  try {
    const api = await pythonApi();
    if (!api) {
      return undefined;
    }
    const envPath = api.environments?.getActiveEnvironmentPath(resource);
    if (envPath) {
      const env = await api.environments?.resolveEnvironment(envPath);
      const exe = env?.executable?.uri?.fsPath;
      if (exe) {
        return { command: [exe], source: 'Python extension' };
      }
    }
    const legacy = api.settings?.getExecutionDetails?.(resource)?.execCommand;
    if (legacy && legacy.length > 0) {
      return { command: legacy, source: 'Python extension' };
    }
  } catch (err) {
    log(`The Python extension did not give an interpreter: ${String(err)}`);
  }
  return undefined;
}

/** Fires when the Python extension's selected interpreter changes (no-op without it). */
export async function onInterpreterChange(listener: () => void): Promise<vscode.Disposable> {
  try {
    const api = await pythonApi();
    const event = api?.environments?.onDidChangeActiveEnvironmentPath;
    if (event) {
      return event(() => listener());
    }
  } catch {
    // No Python extension, or it failed to activate: nothing to follow.
  }
  return new vscode.Disposable(() => undefined);
}
