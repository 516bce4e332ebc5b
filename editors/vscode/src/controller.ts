// Owns the language client's life (locate, start, stop, restart) and the status bar.

import * as vscode from 'vscode';
import { State, type LanguageClient } from 'vscode-languageclient/node';
import { createClient, SECTION, type InlineMiddleware } from './client';
import { locateServer, notFoundMessage, type ServerCommand } from './locate';
import { nodeProbes } from './probes';
import { selectedInterpreter } from './python';
import { COMPLETION_UPDATED, parseUpdate, stillThere, type EditorState } from './refresh';
import {
  formatClientState,
  formatStatus,
  parseStatus,
  type ClientState,
  type StatusParams,
  type StatusView,
} from './status';

export const STATUS_NOTIFICATION = 'memosight/status';

/** What the status bar currently says, for the e2e suite and for `memosight.statusMenu`. */
export interface StatusSnapshot {
  state: StatusParams['state'] | ClientState;
  message: string;
  lastLatencyMs: number | null;
  view: StatusView;
  /** The server's embedded-fallback notice and its fix (null when a real model serves). */
  notice: string | null;
  fix: string | null;
}

export class Controller implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private lastLatencyMs: number | null = null;
  /** Times the editor asked again because a suggestion grew (memosight/completionUpdated). */
  refreshes = 0;
  private snapshot: StatusSnapshot;
  private readonly statusEmitter = new vscode.EventEmitter<StatusSnapshot>();
  /** Serialises start/stop so a restart during a start cannot leave two servers. */
  private queue: Promise<unknown> = Promise.resolve();

  readonly onDidChangeStatus = this.statusEmitter.event;

  constructor(
    private readonly output: vscode.LogOutputChannel,
    private readonly statusItem: vscode.StatusBarItem,
    private readonly inlineMiddleware?: InlineMiddleware,
  ) {
    this.snapshot = this.show('starting', '', formatClientState('starting'));
  }

  get status(): StatusSnapshot {
    return this.snapshot;
  }

  get languageClient(): LanguageClient | undefined {
    return this.client?.state === State.Running ? this.client : undefined;
  }

  start(): Promise<void> {
    return this.enqueue(() => this.doStart());
  }

  stop(): Promise<void> {
    return this.enqueue(() => this.doStop());
  }

  restart(): Promise<void> {
    return this.enqueue(async () => {
      this.output.info('Restarting the server');
      await this.doStop();
      await this.doStart();
    });
  }

  dispose(): void {
    void this.stop();
    this.statusEmitter.dispose();
  }

  private enqueue(job: () => Promise<void>): Promise<void> {
    const next = this.queue.then(job, job);
    this.queue = next.catch(() => undefined);
    return next;
  }

  private async doStart(): Promise<void> {
    this.show('starting', '', formatClientState('starting'));
    try {
      const server = await this.locate();
      if (server) {
        await this.launch(server);
      }
    } catch (err) {
      this.fail(`MemoSight: the server failed to start: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  /** The server command in the documented order, or undefined after telling the user how to install it. */
  private async locate(): Promise<ServerCommand | undefined> {
    const resource = vscode.window.activeTextEditor?.document.uri ?? vscode.workspace.workspaceFolders?.[0]?.uri;
    const config = vscode.workspace.getConfiguration(SECTION, resource);
    const log = (line: string): void => this.output.info(line);
    log('Looking for the MemoSight language server:');
    const interpreter = await selectedInterpreter(resource, log);
    const server = await locateServer(
      {
        serverPath: config.get<string>('serverPath'),
        serverArgs: config.get<string[]>('serverArgs'),
        interpreter: interpreter?.command,
        interpreterSource: interpreter?.source,
      },
      nodeProbes,
      log,
    );
    if (!server) {
      const message = notFoundMessage(interpreter?.command);
      this.output.error(message);
      this.show('notFound', message, formatClientState('notFound', message));
      void vscode.window.showErrorMessage(message, 'Open Settings', 'Open Logs').then((choice) => {
        if (choice === 'Open Settings') {
          void vscode.commands.executeCommand('workbench.action.openSettings', 'memosight.');
        } else if (choice === 'Open Logs') {
          this.output.show();
        }
      });
    }
    return server;
  }

  private async launch(server: ServerCommand): Promise<void> {
    this.output.info(`Starting: ${[server.command, ...server.args].join(' ')}`);
    const client = createClient(server, this.output, this.inlineMiddleware);
    client.onNotification(STATUS_NOTIFICATION, (raw: unknown) => this.onStatus(raw));
    client.onNotification(COMPLETION_UPDATED, (raw: unknown) => this.onCompletionUpdated(raw));
    client.onDidChangeState((event) => {
      if (event.newState === State.Stopped && this.client === client) {
        this.show('stopped', '', formatClientState('stopped', 'See the MemoSight output for why.'));
      }
    });
    this.client = client;
    await client.start();
  }

  private fail(message: string): void {
    this.output.error(message);
    this.show('error', message, formatClientState('stopped', message));
    void vscode.window.showErrorMessage(message, 'Open Logs').then((choice) => {
      if (choice) {
        this.output.show();
      }
    });
  }

  private async doStop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (client && client.state !== State.Stopped) {
      try {
        await client.stop(5000);
      } catch (err) {
        this.output.warn(`Stopping the server: ${String(err)}`);
      }
    }
    this.show('stopped', '', formatClientState('stopped'));
  }

  /** A suggestion shown early grew: ask again where the user changed nothing since. */
  private onCompletionUpdated(raw: unknown): void {
    const update = parseUpdate(raw);
    if (!update) {
      this.output.warn(`Ignoring a malformed ${COMPLETION_UPDATED} notification: ${JSON.stringify(raw)}`);
      return;
    }
    const editor = vscode.window.activeTextEditor;
    const now: EditorState | undefined = editor && {
      uri: editor.document.uri.toString(),
      version: editor.document.version,
      line: editor.selection.active.line,
      character: editor.selection.active.character,
      empty: editor.selection.isEmpty,
    };
    if (stillThere(update, now)) {
      this.refreshes += 1;
      void vscode.commands.executeCommand('editor.action.inlineSuggest.trigger');
    }
  }

  private onStatus(raw: unknown): void {
    const status = parseStatus(raw);
    if (!status) {
      this.output.warn(`Ignoring a malformed ${STATUS_NOTIFICATION} notification: ${JSON.stringify(raw)}`);
      return;
    }
    if (status.lastLatencyMs !== null) {
      this.lastLatencyMs = status.lastLatencyMs;
    }
    if (status.state === 'error') {
      this.output.error(`Server error: ${status.message}`);
    }
    if (status.notice && status.notice !== this.snapshot.notice) {
      this.output.warn(`${status.notice}${status.fix ? `: ${status.fix}` : ''}`);
    }
    this.show(status.state, status.message, formatStatus(status, this.lastLatencyMs), status);
  }

  private show(
    state: StatusSnapshot['state'],
    message: string,
    view: StatusView,
    fallback: Pick<StatusParams, 'notice' | 'fix'> = { notice: null, fix: null },
  ): StatusSnapshot {
    this.statusItem.text = view.text;
    this.statusItem.tooltip = view.tooltip;
    this.statusItem.backgroundColor =
      view.severity === 'none' ? undefined : new vscode.ThemeColor(`statusBarItem.${view.severity}Background`);
    this.statusItem.show();
    this.snapshot = { state, message, lastLatencyMs: this.lastLatencyMs, view, notice: fallback.notice, fix: fallback.fix };
    this.statusEmitter.fire(this.snapshot);
    return this.snapshot;
  }
}
