// Entry point: activate() only wires things together.

import * as vscode from 'vscode';
import { SECTION } from './client';
import { showContext, showStats, statusMenu, toggle, ReportProvider, REPORT_SCHEME } from './commands';
import { Controller, type StatusSnapshot } from './controller';
import { NextEditView } from './nextEditView';
import { onInterpreterChange } from './python';
import { needsRestart } from './settings';

/** What activate() returns: used by the end-to-end suite, stable enough for other extensions. */
export interface MemoSightApi {
  readonly status: StatusSnapshot;
  readonly onDidChangeStatus: vscode.Event<StatusSnapshot>;
  readonly controller: Controller;
  readonly nextEdits: NextEditView;
}

export function activate(context: vscode.ExtensionContext): MemoSightApi {
  const output = vscode.window.createOutputChannel('MemoSight', { log: true });
  const statusItem = vscode.window.createStatusBarItem('memosight.status', vscode.StatusBarAlignment.Right, 100);
  statusItem.name = 'MemoSight';
  statusItem.command = 'memosight.statusMenu';
  // Each needs the other: next edits ask through the controller's client, whose inline provider
  // shows next edits' ghost text.
  const nextEdits: NextEditView = new NextEditView(() => controller.languageClient, output);
  const controller: Controller = new Controller(output, statusItem, nextEdits.inlineMiddleware);
  const reports = new ReportProvider();

  context.subscriptions.push(
    output,
    statusItem,
    controller,
    nextEdits,
    vscode.workspace.registerTextDocumentContentProvider(REPORT_SCHEME, reports),
    vscode.commands.registerCommand('memosight.toggle', () => toggle('enable')),
    vscode.commands.registerCommand('memosight.toggleNextEdit', () => toggle('nextEdit.enabled')),
    vscode.commands.registerCommand('memosight.applyNextEdit', () => nextEdits.apply()),
    vscode.commands.registerCommand('memosight.dismissNextEdit', () => nextEdits.dismiss()),
    vscode.commands.registerCommand('memosight.suggestNextEdit', () => nextEdits.suggest()),
    vscode.commands.registerCommand('memosight.restart', () => controller.restart()),
    vscode.commands.registerCommand('memosight.showContext', () => showContext(controller, reports)),
    vscode.commands.registerCommand('memosight.showStats', () => showStats(controller, reports)),
    vscode.commands.registerCommand('memosight.openLogs', () => output.show()),
    vscode.commands.registerCommand('memosight.openSettings', () =>
      vscode.commands.executeCommand('workbench.action.openSettings', `@ext:${context.extension.id}`),
    ),
    vscode.commands.registerCommand('memosight.statusMenu', () => statusMenu(controller)),
    // Server settings reach the running server through didChangeConfiguration (see client.ts);
    // only a change of how the server is started needs a restart.
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (needsRestart((key) => event.affectsConfiguration(`${SECTION}.${key}`))) {
        void controller.restart();
      }
    }),
  );
  // Not awaited: activating the Python extension must not delay ours.
  void onInterpreterChange(() => {
    if (!vscode.workspace.getConfiguration(SECTION).get<string>('pythonPath')) {
      void controller.restart();
    }
  }).then((listener) => context.subscriptions.push(listener));

  active = controller;
  void controller.start();
  return {
    get status() {
      return controller.status;
    },
    onDidChangeStatus: controller.onDidChangeStatus,
    controller,
    nextEdits,
  };
}

/** The running controller, so deactivate() can wait for the server to stop. */
let active: Controller | undefined;

export async function deactivate(): Promise<void> {
  await active?.stop();
  active = undefined;
}
