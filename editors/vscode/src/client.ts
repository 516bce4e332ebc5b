// The LanguageClient for one located server. The server only ever sees its own settings tree:
// client-only settings (serverPath, pythonPath, trace) are filtered out of every message.

import * as vscode from 'vscode';
import {
  DidChangeConfigurationNotification,
  type Executable,
  LanguageClient,
  type LanguageClientOptions,
  type Middleware,
  TransportKind,
} from 'vscode-languageclient/node';
import type { ServerCommand } from './locate';
import { buildServerSettings, type JsonObject, USER_ONLY_SETTINGS } from './settings';

export const SECTION = 'memosight';

/** The server's settings tree for a scope (a document or folder URI), from VS Code's settings. */
export function serverSettings(scope?: vscode.Uri): JsonObject {
  const config = vscode.workspace.getConfiguration(SECTION, scope);
  const folder = scope ? vscode.workspace.getWorkspaceFolder(scope) : vscode.workspace.workspaceFolders?.[0];
  // User-only settings (the server honours them from initializationOptions only): the user's
  // own value, never a workspace's.
  const read = (key: string): unknown =>
    USER_ONLY_SETTINGS.includes(key) ? config.inspect(key)?.globalValue : config.get(key);
  return buildServerSettings(read, {
    workspaceFolder: folder?.uri.fsPath,
    userHome: process.env.HOME ?? process.env.USERPROFILE,
  });
}

/** The inline provider's middleware (next edits' ghost text in front of the server's items). */
export type InlineMiddleware = NonNullable<Middleware['provideInlineCompletionItems']>;

export function createClient(
  server: ServerCommand,
  output: vscode.LogOutputChannel,
  inline?: InlineMiddleware,
): LanguageClient {
  const executable: Executable = {
    command: server.command,
    args: server.args,
    transport: TransportKind.stdio,
    // PYTHONSAFEPATH: `python -m` must not import modules from the workspace it starts in.
    options: { env: { ...process.env, PYTHONUNBUFFERED: '1', PYTHONSAFEPATH: '1' } },
  };
  let client: LanguageClient | undefined = undefined;
  const options: LanguageClientOptions = {
    // Every file: the server decides per language (memosight.languages).
    documentSelector: [{ scheme: 'file' }, { scheme: 'untitled' }],
    outputChannel: output,
    initializationOptions: serverSettings(),
    synchronize: { configurationSection: SECTION },
    middleware: {
      provideInlineCompletionItems: inline,
      workspace: {
        configuration: async (params, token, next) => {
          const result = await next(params, token);
          if (!Array.isArray(result)) {
            return result;
          }
          return params.items.map((item, i) =>
            item.section === SECTION
              ? serverSettings(item.scopeUri ? vscode.Uri.parse(item.scopeUri) : undefined)
              : result[i],
          );
        },
        didChangeConfiguration: async () => {
          // The change may also restart the server (serverPath, pythonPath): a client stopped
          // meanwhile has nobody to tell, which is no error.
          if (!client?.isRunning()) {
            return;
          }
          try {
            await client.sendNotification(DidChangeConfigurationNotification.type, {
              settings: { [SECTION]: serverSettings() },
            });
          } catch (err) {
            if (client.isRunning()) {
              throw err;
            }
          }
        },
      },
    },
  };
  client = new LanguageClient(SECTION, 'MemoSight', executable, options);
  return client;
}
