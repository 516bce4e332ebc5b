// The MemoSight commands. Each one is a thin call into the controller or the server.

import * as vscode from 'vscode';
import { SECTION } from './client';
import type { Controller } from './controller';
import { formatContext, formatStats, type ContextResult } from './reports';
import { fixCommand } from './status';

export const CONTEXT_REQUEST = 'memosight/context';
export const STATS_REQUEST = 'memosight/stats';
export const REPORT_SCHEME = 'memosight';

/** Read-only virtual documents (memosight:/context.md, memosight:/stats.md). */
export class ReportProvider implements vscode.TextDocumentContentProvider {
  private readonly contents = new Map<string, string>();
  private readonly changed = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.changed.event;

  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.contents.get(uri.toString()) ?? '';
  }

  async open(name: string, text: string): Promise<vscode.TextEditor> {
    const uri = vscode.Uri.from({ scheme: REPORT_SCHEME, path: `/${name}` });
    this.contents.set(uri.toString(), text);
    this.changed.fire(uri);
    const doc = await vscode.workspace.openTextDocument(uri);
    return vscode.window.showTextDocument(doc, { viewColumn: vscode.ViewColumn.Beside, preview: true });
  }
}

function runningClient(controller: Controller) {
  const client = controller.languageClient;
  if (!client) {
    void vscode.window.showWarningMessage('MemoSight: the server is not running (see MemoSight: Open Logs).');
  }
  return client;
}

/** Flips a boolean `memosight.*` setting (`enable`, `nextEdit.enabled`) where it is set
 * (workspace folder, workspace or user settings). */
export async function toggle(key: 'enable' | 'nextEdit.enabled'): Promise<boolean> {
  const config = vscode.workspace.getConfiguration(SECTION);
  const inspect = config.inspect<boolean>(key);
  const enabled = config.get<boolean>(key, true);
  const target =
    inspect?.workspaceFolderValue !== undefined
      ? vscode.ConfigurationTarget.WorkspaceFolder
      : inspect?.workspaceValue !== undefined
        ? vscode.ConfigurationTarget.Workspace
        : vscode.ConfigurationTarget.Global;
  await config.update(key, !enabled, target);
  return !enabled;
}

export async function showContext(controller: Controller, reports: ReportProvider): Promise<ContextResult | undefined> {
  const editor = vscode.window.activeTextEditor;
  if (!editor || editor.document.uri.scheme === REPORT_SCHEME) {
    void vscode.window.showInformationMessage('MemoSight: put the cursor in an editor first.');
    return undefined;
  }
  const client = runningClient(controller);
  if (!client) {
    return undefined;
  }
  const position = editor.selection.active;
  const params = {
    textDocument: { uri: editor.document.uri.toString() },
    position: { line: position.line, character: position.character },
  };
  const result = await client.sendRequest<ContextResult>(CONTEXT_REQUEST, params);
  await reports.open('context.md', formatContext(result, params.textDocument.uri, params.position));
  return result;
}

export async function showStats(controller: Controller, reports: ReportProvider): Promise<Record<string, unknown> | undefined> {
  const client = runningClient(controller);
  if (!client) {
    return undefined;
  }
  const stats = await client.sendRequest<Record<string, unknown>>(STATS_REQUEST, {});
  await reports.open('stats.md', formatStats(stats));
  return stats;
}

/** The status menu's item for the embedded fallback's fix (not a registered command). */
const FIX_ITEM = 'memosight.fixFallback';

/** The embedded fallback's fix: its command copied for a terminal, else the model.path setting. */
async function fixFallback(fix: string | null): Promise<void> {
  const command = fixCommand(fix);
  if (!command) {
    await vscode.commands.executeCommand('workbench.action.openSettings', `${SECTION}.model.path`);
    return;
  }
  await vscode.env.clipboard.writeText(command);
  void vscode.window.showInformationMessage(
    `MemoSight: copied \`${command}\`. Run it in a terminal, then restart the server: model.path "auto" finds the model.`,
  );
}

/** The status bar's click: a menu of the commands (first, while the embedded fallback serves,
 * the one action that fixes it). */
export async function statusMenu(controller: Controller): Promise<void> {
  const enabled = vscode.workspace.getConfiguration(SECTION).get<boolean>('enable', true);
  const nextEdits = vscode.workspace.getConfiguration(SECTION).get<boolean>('nextEdit.enabled', true);
  const { notice, fix } = controller.status;
  const fallback: (vscode.QuickPickItem & { command: string })[] = notice
    ? [{ label: `$(warning) ${notice}`, detail: fix ?? undefined, command: FIX_ITEM }]
    : [];
  const items: (vscode.QuickPickItem & { command: string })[] = [
    ...fallback,
    { label: enabled ? 'Disable completions' : 'Enable completions', command: 'memosight.toggle' },
    { label: nextEdits ? 'Disable next edits' : 'Enable next edits', command: 'memosight.toggleNextEdit' },
    { label: 'Show context at cursor', command: 'memosight.showContext' },
    { label: 'Show stats', command: 'memosight.showStats' },
    { label: 'Restart server', command: 'memosight.restart' },
    { label: 'Open logs', command: 'memosight.openLogs' },
    { label: 'Open settings', command: 'memosight.openSettings' },
  ];
  const picked = await vscode.window.showQuickPick(items, {
    title: `MemoSight: ${controller.status.state}${controller.status.message ? ` — ${controller.status.message}` : ''}`,
  });
  if (picked && picked.command === FIX_ITEM) {
    await fixFallback(fix);
  } else if (picked) {
    await vscode.commands.executeCommand(picked.command);
  }
}
