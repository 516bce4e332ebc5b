import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { locateServer, notFoundMessage, scriptNextTo, type LocateProbes } from '../../locate';

/** Probes over a fixed world: which files are executable, which interpreters have the module. */
function world(opts: { executables?: string[]; withModule?: string[]; onPath?: string }): LocateProbes & { calls: string[] } {
  const calls: string[] = [];
  return {
    calls,
    isExecutable: async (file) => {
      calls.push(`exec? ${file}`);
      return (opts.executables ?? []).includes(file);
    },
    hasModule: async (interpreter, module) => {
      calls.push(`module? ${interpreter.join(' ')} ${module}`);
      return (opts.withModule ?? []).includes(interpreter[0]);
    },
    which: async (name) => {
      calls.push(`which ${name}`);
      return opts.onPath;
    },
  };
}

describe('locateServer', () => {
  it('uses memosight.serverPath first, with the extra arguments', async () => {
    const probes = world({ executables: ['/opt/ms/memosight-lsp'], withModule: ['/venv/bin/python'], onPath: '/usr/bin/memosight-lsp' });
    const log: string[] = [];
    const found = await locateServer(
      { serverPath: '/opt/ms/memosight-lsp', serverArgs: ['-v'], interpreter: ['/venv/bin/python'] },
      probes,
      (l) => log.push(l),
    );
    assert.deepEqual(found, { command: '/opt/ms/memosight-lsp', args: ['-v'], source: 'setting' });
    assert.equal(log.length, 1);
    assert.match(log[0], /^1\. memosight\.serverPath: using/);
    assert.deepEqual(probes.calls, ['exec? /opt/ms/memosight-lsp']);
  });

  it('falls through a serverPath that does not exist to the interpreter, and says so', async () => {
    const probes = world({ withModule: ['/venv/bin/python'] });
    const log: string[] = [];
    const found = await locateServer(
      { serverPath: '/nope', interpreter: ['/venv/bin/python'], interpreterSource: 'memosight.pythonPath' },
      probes,
      (l) => log.push(l),
    );
    assert.deepEqual(found, { command: '/venv/bin/python', args: ['-m', 'memosight_lsp'], source: 'interpreter' });
    assert.match(log[0], /\/nope is not an executable file/);
    assert.match(log[1], /^2\. Python interpreter \(memosight\.pythonPath\): \/venv\/bin\/python has memosight_lsp/);
  });

  it('keeps interpreter arguments (e.g. the py launcher) before -m', async () => {
    const probes = world({ withModule: ['py'] });
    const found = await locateServer({ interpreter: ['py', '-3.11'], serverArgs: ['--log-file', 'x'] }, probes, () => {});
    assert.deepEqual(found?.args, ['-3.11', '-m', 'memosight_lsp', '--log-file', 'x']);
  });

  it('uses the console script next to an interpreter that cannot import the module', async () => {
    const probes = world({ executables: ['/venv/bin/memosight-lsp'] });
    const found = await locateServer({ interpreter: ['/venv/bin/python'] }, probes, () => {});
    assert.deepEqual(found, { command: '/venv/bin/memosight-lsp', args: [], source: 'interpreter-script' });
  });

  it('ends with PATH, logging all three steps in order', async () => {
    const probes = world({ onPath: '/home/u/.local/bin/memosight-lsp' });
    const log: string[] = [];
    const found = await locateServer({ interpreter: ['/usr/bin/python3'] }, probes, (l) => log.push(l));
    assert.equal(found?.source, 'path');
    assert.equal(found?.command, '/home/u/.local/bin/memosight-lsp');
    assert.deepEqual(
      log.map((l) => l.slice(0, 2)),
      ['1.', '2.', '3.'],
    );
  });

  it('returns undefined when nothing is found, without an interpreter', async () => {
    const log: string[] = [];
    const found = await locateServer({ serverPath: '  ' }, world({}), (l) => log.push(l));
    assert.equal(found, undefined);
    assert.equal(log.length, 3);
    assert.match(log[0], /not set/);
    assert.match(log[1], /none selected/);
    assert.match(log[2], /no memosight-lsp found/);
  });
});

describe('scriptNextTo / notFoundMessage', () => {
  it('finds the console script beside the interpreter on POSIX and Windows', () => {
    assert.equal(scriptNextTo('/venv/bin/python', 'linux'), '/venv/bin/memosight-lsp');
    assert.equal(scriptNextTo('C:\\venv\\Scripts\\python.exe', 'win32'), 'C:\\venv\\Scripts\\memosight-lsp.exe');
  });

  it('tells how to install, with the interpreter it would use', () => {
    const message = notFoundMessage(['/venv/bin/python']);
    assert.match(message, /\/venv\/bin\/python -m pip install memosight-lsp/);
    assert.match(message, /memosight\.serverPath/);
    assert.match(notFoundMessage(), /`python -m pip install memosight-lsp`/);
  });
});
