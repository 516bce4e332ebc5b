// Status bar text from the server's `memosight/status` notification. No `vscode` import.

export type ServerState = 'loading' | 'ready' | 'disabled' | 'error';

/** Params of the `memosight/status` notification. */
export interface StatusParams {
  state: ServerState;
  message: string;
  model: string | null;
  lastLatencyMs: number | null;
  /** Whenever the embedded model serves: "embedded fallback: no code model found" (or why). */
  notice: string | null;
  /** The one action that ends the fallback (a command in backticks, or a setting to change). */
  fix: string | null;
}

/** States the extension itself knows about before/without a server. */
export type ClientState = 'starting' | 'stopped' | 'notFound';

export interface StatusView {
  text: string;
  tooltip: string;
  /** Background: none, warning (disabled/not found) or error. */
  severity: 'none' | 'warning' | 'error';
}

const STATES: readonly string[] = ['loading', 'ready', 'disabled', 'error'];

/** The params if they have the documented shape; undefined otherwise (a bad message is ignored). */
export function parseStatus(raw: unknown): StatusParams | undefined {
  if (typeof raw !== 'object' || raw === null) {
    return undefined;
  }
  const r = raw as Record<string, unknown>;
  if (typeof r.state !== 'string' || !STATES.includes(r.state)) {
    return undefined;
  }
  const latency = typeof r.lastLatencyMs === 'number' && Number.isFinite(r.lastLatencyMs) ? r.lastLatencyMs : null;
  return {
    state: r.state as ServerState,
    message: typeof r.message === 'string' ? r.message : '',
    model: typeof r.model === 'string' ? r.model : null,
    lastLatencyMs: latency,
    notice: typeof r.notice === 'string' && r.notice !== '' ? r.notice : null,
    fix: typeof r.fix === 'string' && r.fix !== '' ? r.fix : null,
  };
}

/** The command the server's `fix` names in backticks (what the status menu copies), if any. */
export function fixCommand(fix: string | null): string | undefined {
  const match = fix ? /`([^`]+)`/.exec(fix) : null;
  return match ? match[1] : undefined;
}

export function formatLatency(ms: number): string {
  if (ms < 10) {
    return `${ms.toFixed(1)} ms`;
  }
  if (ms < 10_000) {
    return `${Math.round(ms)} ms`;
  }
  return `${(ms / 1000).toFixed(1)} s`;
}

/** What the status bar shows for a server status. `lastLatencyMs` persists across notifications. */
export function formatStatus(status: StatusParams, lastLatencyMs: number | null = status.lastLatencyMs): StatusView {
  const model = status.model ? `Model: ${status.model}` : 'Model: (none loaded)';
  const latency = lastLatencyMs !== null ? `Last completion: ${formatLatency(lastLatencyMs)}` : 'No completion yet';
  const notice = status.notice ? `${status.notice}${status.fix ? `\nFix: ${status.fix}` : ''}\n` : '';
  const detail = (status.message ? `${status.message}\n` : '') + notice;
  const tooltip = (head: string): string => `MemoSight: ${head}\n${detail}${model}\n${latency}\nClick for actions`;
  switch (status.state) {
    case 'loading':
      return { text: '$(loading~spin) MemoSight', tooltip: tooltip('loading model'), severity: 'none' };
    case 'ready': {
      const suffix = lastLatencyMs !== null ? ` ${formatLatency(lastLatencyMs)}` : '';
      // The embedded fallback serves: ready, but say so until a real code model is there.
      const severity = status.notice ? 'warning' : 'none';
      return { text: `$(sparkle) MemoSight${suffix}`, tooltip: tooltip('ready'), severity };
    }
    case 'disabled':
      return { text: '$(circle-slash) MemoSight', tooltip: tooltip('disabled'), severity: 'warning' };
    case 'error':
      return { text: '$(error) MemoSight', tooltip: tooltip('error'), severity: 'error' };
  }
}

export function formatClientState(state: ClientState, detail = ''): StatusView {
  const suffix = detail ? `\n${detail}` : '';
  switch (state) {
    case 'starting':
      return { text: '$(loading~spin) MemoSight', tooltip: `MemoSight: starting the server${suffix}`, severity: 'none' };
    case 'stopped':
      return { text: '$(debug-stop) MemoSight', tooltip: `MemoSight: server stopped${suffix}\nClick for actions`, severity: 'warning' };
    case 'notFound':
      return {
        text: '$(warning) MemoSight',
        tooltip: `MemoSight: server not found${suffix}\nClick for actions`,
        severity: 'warning',
      };
  }
}
