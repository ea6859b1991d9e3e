// The README's blocks type-check against the published declarations (dist/*.d.ts), as a user's
// TypeScript build would check them: the seed worker included, with `strict` on.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import ts from 'typescript';
import { TMP, readmeBlocks } from './blocks.mjs';

test('every README block type-checks under strict TypeScript', () => {
  mkdirSync(TMP, { recursive: true });
  const files = [...readmeBlocks('worker'), ...readmeBlocks('run')].map((source, k) => {
    const file = `${TMP}typecheck-${k + 1}.mts`;
    writeFileSync(file, source);
    return file;
  });
  assert.ok(files.length >= 7);
  const program = ts.createProgram(files, {
    strict: true,
    noEmit: true,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    lib: ['lib.es2022.d.ts', 'lib.dom.d.ts'],
    types: [],
    skipLibCheck: true,
  });
  const diagnostics = ts.getPreEmitDiagnostics(program).map((d) => {
    const where = d.file ? `${d.file.fileName.split('/').pop()}:${d.file.getLineAndCharacterOfPosition(d.start ?? 0).line + 1}` : '';
    return `${where} ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`;
  });
  assert.deepEqual(diagnostics, []);
});
