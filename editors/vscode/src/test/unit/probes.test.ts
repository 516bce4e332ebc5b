// The real probes against real files and a real child process.
import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { locateServer } from '../../locate';
import { hasModule, isExecutable, nodeProbes, which } from '../../probes';

describe('node probes', () => {
  let dir = '';
  before(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'memosight-probes-'));
    // A stand-in "python" that can import only memosight_lsp: exit 0 iff the code names it.
    writeFileSync(path.join(dir, 'python'), '#!/bin/sh\ncase "$2" in *memosight_lsp*) exit 0;; *) exit 1;; esac\n');
    chmodSync(path.join(dir, 'python'), 0o755);
    writeFileSync(path.join(dir, 'memosight-lsp'), '#!/bin/sh\n');
    chmodSync(path.join(dir, 'memosight-lsp'), 0o755);
    writeFileSync(path.join(dir, 'not-executable'), 'x');
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('isExecutable: true for an executable file only', async () => {
    assert.equal(await isExecutable(path.join(dir, 'memosight-lsp')), true);
    assert.equal(await isExecutable(path.join(dir, 'not-executable')), false);
    assert.equal(await isExecutable(dir), false);
    assert.equal(await isExecutable(path.join(dir, 'missing')), false);
  });

  it('hasModule runs the interpreter and reads its exit status', async () => {
    assert.equal(await hasModule([path.join(dir, 'python')], 'memosight_lsp'), true);
    assert.equal(await hasModule([path.join(dir, 'python')], 'other_module'), false);
    assert.equal(await hasModule([path.join(dir, 'no-such-python')], 'memosight_lsp'), false);
  });

  it('which searches PATH in order', async () => {
    assert.equal(await which('memosight-lsp', ['/nonexistent', dir].join(path.delimiter), 'linux'), path.join(dir, 'memosight-lsp'));
    assert.equal(await which('memosight-lsp', '/nonexistent', 'linux'), undefined);
  });

  it('locates a real interpreter end to end', async () => {
    const found = await locateServer({ interpreter: [path.join(dir, 'python')] }, nodeProbes, () => {});
    assert.deepEqual(found, { command: path.join(dir, 'python'), args: ['-m', 'memosight_lsp'], source: 'interpreter' });
  });
});
